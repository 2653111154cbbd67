//! `POST /v1/jobs/preview`: a submit's dry run (every check a submit makes, nothing stored),
//! for `sbatch --test-only`.

use berth_model::api::SubmitRequest;
use reqwest::Method;
use serde::Deserialize;

use crate::{Client, Error};

/// The part of the manager's answer a dry run needs: the queue the job would go to (the
/// manager's answer holds more: the spec as stored, who it runs as, its environment).
#[derive(Debug, Clone, Deserialize)]
pub struct SubmitPreview {
    pub queue: String,
}

impl Client {
    /// Checks `req` as a submit would, submitting nothing: the 4xx a submit would get, or
    /// where the job would go.
    pub async fn preview(&self, req: &SubmitRequest) -> Result<SubmitPreview, Error> {
        self.json(self.request(Method::POST, "/v1/jobs/preview").json(req)).await
    }
}
