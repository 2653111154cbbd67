//! Serving endpoints (`/v1/endpoints`, `berth serve`): the endpoints themselves and the
//! tokens that may call them.

use berth_model::endpoint::{
    CreateEndpoint, CreateEndpointToken, CreatedEndpointToken, EndpointTokenView, EndpointView, UpdateEndpoint,
};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use reqwest::Method;

use crate::{Client, Error};

/// What a name must escape in a path: everything but what valid names are made of.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_');

/// `/v1/endpoints/NAME`, the name escaped: a mistyped name must reach the manager as a name
/// it refuses, not as another path.
fn endpoint_path(name: &str) -> String {
    format!("/v1/endpoints/{}", utf8_percent_encode(name, SEGMENT))
}

impl Client {
    pub async fn create_endpoint(&self, req: &CreateEndpoint) -> Result<EndpointView, Error> {
        self.json(self.request(Method::POST, "/v1/endpoints").json(req)).await
    }

    pub async fn endpoints(&self) -> Result<Vec<EndpointView>, Error> {
        self.json(self.request(Method::GET, "/v1/endpoints")).await
    }

    pub async fn endpoint(&self, name: &str) -> Result<EndpointView, Error> {
        self.json(self.request(Method::GET, &endpoint_path(name))).await
    }

    pub async fn update_endpoint(&self, name: &str, req: &UpdateEndpoint) -> Result<EndpointView, Error> {
        self.json(self.request(Method::PATCH, &endpoint_path(name)).json(req)).await
    }

    pub async fn remove_endpoint(&self, name: &str) -> Result<(), Error> {
        self.send(self.request(Method::DELETE, &endpoint_path(name))).await.map(|_| ())
    }

    pub async fn create_endpoint_token(
        &self,
        name: &str,
        req: &CreateEndpointToken,
    ) -> Result<CreatedEndpointToken, Error> {
        self.json(self.request(Method::POST, &format!("{}/tokens", endpoint_path(name))).json(req)).await
    }

    pub async fn endpoint_tokens(&self, name: &str) -> Result<Vec<EndpointTokenView>, Error> {
        self.json(self.request(Method::GET, &format!("{}/tokens", endpoint_path(name)))).await
    }

    pub async fn revoke_endpoint_token(&self, name: &str, id: i64) -> Result<(), Error> {
        self.send(self.request(Method::DELETE, &format!("{}/tokens/{id}", endpoint_path(name)))).await.map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_escaped_in_paths() {
        assert_eq!(endpoint_path("llm-7"), "/v1/endpoints/llm-7");
        assert_eq!(endpoint_path("a/b"), "/v1/endpoints/a%2Fb");
    }
}
