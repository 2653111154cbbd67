//! Jobs (`/v1/jobs`): submit, list, show, cancel, signal, requeue, hold and release, their
//! logs and the web apps they serve.

use berth_model::api::{
    AppLink, AppView, CancelResult, CancelTasks, HoldRequest, HoldResult, JobDetail, JobListQuery, JobView,
    RequeueResult, SignalRequest, SignalResult, SubmitRequest, TaskCancelled,
};
use berth_model::protocol::LogStream;
use berth_model::{Hold, JobId};
use reqwest::Method;

use crate::{Client, Error};

/// Header naming the log offset to ask for next.
const NEXT_OFFSET: &str = "berth-next-offset";
/// Header saying that the job has ended, so a log will not grow any more.
const JOB_DONE: &str = "berth-job-done";
/// Header naming the attempt whose log it is.
const ATTEMPT: &str = "berth-attempt";

/// One piece of a log: the bytes from the asked offset on, where to continue, and whether the
/// job has ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogChunk {
    pub bytes: Vec<u8>,
    pub next_offset: u64,
    pub done: bool,
    /// The job's attempt this log is of (absent from older managers): when it changes, the
    /// job was requeued and its log starts over.
    pub attempt: Option<u32>,
}

impl Client {
    /// Submits a job. Sent with an idempotency key: a submit whose answer is lost (its
    /// manager died, a takeover) is sent again safely.
    pub async fn submit(&self, req: &SubmitRequest) -> Result<JobView, Error> {
        let key = format!("{:032x}", rand::random::<u128>());
        self.json(self.request(Method::POST, "/v1/jobs").header("idempotency-key", key).json(req)).await
    }

    /// `GET /v1/jobs` with every filter `q` sets (serde leaves the unset ones out).
    pub async fn jobs(&self, q: &JobListQuery) -> Result<Vec<JobView>, Error> {
        self.json(self.request(Method::GET, "/v1/jobs").query(q)).await
    }

    /// Job `id` in full: spec, kernels, history.
    pub async fn job(&self, id: JobId) -> Result<JobDetail, Error> {
        self.json(self.request(Method::GET, &format!("/v1/jobs/{id}"))).await
    }

    /// The apps job `id` serves (`berth apps`).
    pub async fn apps(&self, id: JobId) -> Result<Vec<AppView>, Error> {
        self.json(self.request(Method::GET, &format!("/v1/jobs/{id}/apps"))).await
    }

    /// A one-time link opening app `app` of job `id` (`berth open`).
    pub async fn app_link(&self, id: JobId, app: &str) -> Result<AppLink, Error> {
        self.json(self.request(Method::POST, &format!("/v1/jobs/{id}/apps/{app}/link"))).await
    }

    /// Stops running job `id` and queues it again (`POST /v1/jobs/{id}/requeue`).
    pub async fn requeue(&self, id: JobId) -> Result<RequeueResult, Error> {
        self.json(self.request(Method::POST, &format!("/v1/jobs/{id}/requeue"))).await
    }

    /// Holds pending job `id` (a job array: with its pending tasks) until it is released
    /// (`POST /v1/jobs/{id}/hold`); `hold`: which (none: the user's, an admin's for admins).
    pub async fn hold(&self, id: JobId, hold: Option<Hold>) -> Result<HoldResult, Error> {
        let body = HoldRequest { hold };
        self.json(self.request(Method::POST, &format!("/v1/jobs/{id}/hold")).json(&body)).await
    }

    /// Releases held job `id` (`POST /v1/jobs/{id}/release`).
    pub async fn release(&self, id: JobId) -> Result<HoldResult, Error> {
        self.json(self.request(Method::POST, &format!("/v1/jobs/{id}/release"))).await
    }

    pub async fn cancel(&self, id: JobId) -> Result<CancelResult, Error> {
        self.json(self.request(Method::POST, &format!("/v1/jobs/{id}/cancel"))).await
    }

    /// Cancels tasks `tasks` (`--array` syntax) of job array `array`, made or not.
    pub async fn cancel_tasks(&self, array: JobId, tasks: &str) -> Result<Vec<TaskCancelled>, Error> {
        let body = CancelTasks { tasks: tasks.to_string() };
        self.json(self.request(Method::POST, &format!("/v1/jobs/{array}/tasks/cancel")).json(&body)).await
    }

    /// Sends a signal now to running job `id` (an array: its running tasks, or those of `req.tasks`).
    pub async fn signal(&self, id: JobId, req: &SignalRequest) -> Result<SignalResult, Error> {
        self.json(self.request(Method::POST, &format!("/v1/jobs/{id}/signal")).json(req)).await
    }

    /// The log `stream` of kernel `kernel` of job `id`, from byte `offset` on.
    pub async fn logs(&self, id: JobId, stream: LogStream, kernel: u32, offset: u64) -> Result<LogChunk, Error> {
        let stream = stream.as_str();
        let req = self.request(Method::GET, &format!("/v1/jobs/{id}/logs")).query(&[
            ("stream", stream.to_string()),
            ("kernel", kernel.to_string()),
            ("offset", offset.to_string()),
        ]);
        let resp = self.send(req).await?;
        let header = |name: &str| resp.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
        let next = header(NEXT_OFFSET);
        // Without the header we cannot know; treat the job as still running so that `-f`
        // keeps following rather than stopping early.
        let done = header(JOB_DONE).is_some_and(|v| v.eq_ignore_ascii_case("true"));
        let attempt = header(ATTEMPT).and_then(|v| v.trim().parse().ok());
        let bytes = resp.bytes().await.map_err(|e| self.transport_error(e))?.to_vec();
        let next_offset = match next {
            Some(v) => v
                .trim()
                .parse()
                .map_err(|_| Error::Protocol(format!("the manager sent an invalid {NEXT_OFFSET} `{v}`")))?,
            None => offset + bytes.len() as u64,
        };
        Ok(LogChunk { bytes, next_offset, done, attempt })
    }

    /// The manager's job events as they happen (`GET /ui/events`, server-sent events): the
    /// answer, whose body the caller reads as a stream.
    pub async fn job_events(&self) -> Result<reqwest::Response, Error> {
        self.send(self.request(Method::GET, "/ui/events")).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::tests::{answer, fake};

    #[tokio::test]
    async fn sends_the_token_and_reads_logs_headers() {
        let c = fake(|req| {
            if !req.to_lowercase().contains("authorization: bearer sekret") {
                return answer("401 Unauthorized", "", r#"{"error":"no token"}"#);
            }
            assert!(req.starts_with("GET /v1/jobs/7/logs?stream=stderr&kernel=1&offset=3 "), "{req}");
            answer("200 OK", "berth-next-offset: 8\r\nberth-job-done: true\r\n", "hello")
        })
        .await;
        let chunk = c.logs(7, LogStream::Stderr, 1, 3).await.unwrap();
        assert_eq!(chunk, LogChunk { bytes: b"hello".to_vec(), next_offset: 8, done: true, attempt: None });
    }
}
