//! The cluster's machines and queues: nodes (`/v1/nodes`, drain), container images, cached
//! Python environments, queues (`/v1/queues`).

use berth_model::api::{DrainRequest, ImagesView, NodeView, QueueUpdate, QueueView};
use berth_model::environment::{EnvRemoved, NodeEnvs};
use reqwest::Method;

use crate::client::encode_path_segment;
use crate::{Client, Error};

impl Client {
    pub async fn nodes(&self) -> Result<Vec<NodeView>, Error> {
        self.json(self.request(Method::GET, "/v1/nodes")).await
    }

    /// Drains (`Some(reason)` may be empty) or undrains (`None`) a node.
    pub async fn drain_node(&self, name: &str, drain: Option<&DrainRequest>) -> Result<NodeView, Error> {
        let node = encode_path_segment(name);
        match drain {
            Some(req) => self.json(self.request(Method::POST, &format!("/v1/nodes/{node}/drain")).json(req)).await,
            None => self.json(self.request(Method::POST, &format!("/v1/nodes/{node}/undrain"))).await,
        }
    }

    /// The container images each node has.
    pub async fn images(&self) -> Result<ImagesView, Error> {
        self.json(self.request(Method::GET, "/v1/images")).await
    }

    /// Each node's cached Python environments.
    pub async fn envs(&self) -> Result<Vec<NodeEnvs>, Error> {
        self.json(self.request(Method::GET, "/v1/envs")).await
    }

    /// Removes a cached environment (`key` or a prefix) on every node (admins).
    pub async fn remove_env(&self, key: &str) -> Result<EnvRemoved, Error> {
        self.json(self.request(Method::DELETE, &format!("/v1/envs/{}", encode_path_segment(key)))).await
    }

    pub async fn queues(&self) -> Result<Vec<QueueView>, Error> {
        self.json(self.request(Method::GET, "/v1/queues")).await
    }

    /// Creates or changes queue `name` (admins).
    pub async fn put_queue(&self, name: &str, update: &QueueUpdate) -> Result<QueueView, Error> {
        let path = format!("/v1/queues/{}", encode_path_segment(name));
        self.json(self.request(Method::PUT, &path).json(update)).await
    }
}
