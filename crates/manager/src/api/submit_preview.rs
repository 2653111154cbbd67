//! `POST /v1/jobs/preview`: a submit's dry run. The spec goes through every check a submit
//! makes (`jobs::admit`, the pending-jobs quota) and nothing is stored; the answer is the spec
//! as the job would get it (its queue's time limit, QoS, folder mounts resolved) and what it
//! will see when it runs: the Unix user, its home and the environment berth gives it. The
//! dashboard's Submit form shows it before anything is submitted, and the same 4xx a submit
//! would answer.
//!
//! Who a job runs as is each node's agent's decision (`--user-map`, docs/node.md): the answer
//! says what a root agent with the default map does, from the manager host's accounts, which
//! nodes share on a cluster (as they must for Slurm).

use std::sync::Arc;

use axum::extract::State;
use berth_model::JobSpec;
use berth_model::api::SubmitRequest;
use serde::Serialize;
use utoipa::ToSchema;

use crate::auth::Auth;
use crate::error::{ApiError, Json};
use crate::identity::User;
use crate::local::Submitter;
use crate::manager::Manager;
use crate::run_as::{RunAs, run_as};

/// What a job would be, and what it would see, if submitted now.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SubmitPreview {
    /// The spec as a submit would store it.
    pub spec: JobSpec,
    pub queue: String,
    pub run_as: RunAs,
    /// Variables of the job's environment worth knowing before it runs (berth sets more:
    /// `BERTH_*`, the torchrun and Slurm ones, docs/jobs.md).
    pub env: Vec<PreviewVar>,
    /// The data folders mounted into it, where.
    pub mounts: Vec<PreviewMount>,
}

/// A data folder as the job sees it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PreviewMount {
    /// `NAME` or `PROJECT/NAME`.
    pub folder: String,
    pub path: String,
    pub read_only: bool,
}

/// One variable of a job's environment: its value when known at submit, or what sets it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PreviewVar {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub about: Option<String>,
}

/// Check a job without submitting it: the answer says what it would be and see.
#[utoipa::path(post, path = "/v1/jobs/preview", request_body = SubmitRequest, tag = "jobs",
    responses((status = 200, body = SubmitPreview), (status = 400, body = berth_model::api::ErrorBody),
        (status = 401, body = berth_model::api::ErrorBody),
        (status = 403, description = "not a member of the project, or a priority above the quota's", body = berth_model::api::ErrorBody),
        (status = 404, description = "no such project or folder", body = berth_model::api::ErrorBody),
        (status = 422, body = berth_model::api::ErrorBody),
        (status = 429, description = "the pending-jobs quota is full", body = berth_model::api::ErrorBody)))]
pub async fn preview(
    State(m): State<Arc<Manager>>,
    Auth(user): Auth,
    Submitter(submitter): Submitter,
    Json(req): Json<SubmitRequest>,
) -> Result<axum::Json<SubmitPreview>, ApiError> {
    super::jobs::refuse_manager_fields(&req.spec)?;
    let (spec, queue, _) = crate::admission::admit(&m, &user, req.spec).await?;
    m.quotas.check_pending_now(&m.jobs, &user.name, &spec).await?;
    let run_as = run_as(&user, submitter);
    let env = environment(&user, &spec, &run_as);
    let mounts = spec
        .folders
        .iter()
        .map(|f| PreviewMount { folder: f.folder.clone(), path: f.target(), read_only: f.read_only })
        .collect();
    Ok(axum::Json(SubmitPreview { spec, queue, run_as, env, mounts }))
}

/// The variables a job of `spec` will have that matter to what it runs: who and where it is,
/// PATH and its Python environment, and the ones the spec sets.
fn environment(user: &User, spec: &JobSpec, run_as: &RunAs) -> Vec<PreviewVar> {
    let known = |name: &str, value: String| PreviewVar { name: name.into(), value: Some(value), about: None };
    let about = |name: &str, about: &str| PreviewVar { name: name.into(), value: None, about: Some(about.into()) };
    let mut vars = vec![
        match &run_as.home {
            Some(h) => known("HOME", h.clone()),
            None => about("HOME", "the job's own work dir on the node"),
        },
        known("USER", run_as.user.clone()),
    ];
    if let Some(env) = &spec.environment {
        vars.push(about(
            "VIRTUAL_ENV",
            &format!("a Python {} environment built with uv on the node (once per node, then reused)", env.python),
        ));
        vars.push(about("PATH", "the environment's bin first, then the node's standard PATH"));
    } else {
        vars.push(about(
            "PATH",
            "the node's standard PATH (/usr/local/bin:/usr/bin:/bin, and sbin): it may have python3 but no \
             python; a Python environment puts its own first",
        ));
    }
    vars.push(known("BERTH_JOB_NAME", spec.name.clone().unwrap_or_else(|| "job-ID".into())));
    vars.push(known("BERTH_USER", user.name.clone()));
    vars.push(about("BERTH_JOB_ID", "the job's id"));
    vars.extend(spec.env.iter().map(|(k, v)| known(k, v.clone())));
    vars
}
