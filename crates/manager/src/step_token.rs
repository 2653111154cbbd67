//! Job-scoped step tokens: the credential a running job's kernels get (`BERTH_STEP_TOKEN`) so
//! that `srun` inside the job can start tasks in the job's kernels through `GET
//! /v1/jobs/{id}/exec`, and nothing else.
//!
//! A token is `bstep_<job>_<attempt>_<mac>`, the mac an HMAC-SHA256 of the job and attempt
//! under a key the leader keeps in the store's meta table (made once, on the first start), so
//! nothing is stored per job, every manager sharing the store verifies the same tokens, and a
//! restarted manager re-sends the same token in a repeated `StartKernel`. A token is only
//! worth anything while its job's attempt runs: the exec route checks that on every use, so
//! it dies with the attempt (a requeued job gets a new one). Other routes look a token up as
//! an API token and find none (401).

use berth_model::JobId;
use berth_store::{Store, StoreError};
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// What every step token starts with (never an API token's: those are bare hex).
pub const PREFIX: &str = "bstep_";

/// The environment variable kernels get it in.
pub const VAR: &str = "BERTH_STEP_TOKEN";

/// The meta key of the HMAC key (hex).
const META_KEY: &str = "step_token_key";

/// The key step tokens are made and checked with.
#[derive(Clone)]
pub struct StepKey {
    key: Vec<u8>,
}

impl std::fmt::Debug for StepKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StepKey(..)")
    }
}

impl StepKey {
    /// The store's key, made on the first start (only the leader calls this).
    pub async fn load(store: &dyn Store) -> Result<StepKey, StoreError> {
        if let Some(hex_key) = store.meta_get(META_KEY).await?
            && let Ok(key) = hex::decode(hex_key.trim())
            && key.len() >= 32
        {
            return Ok(StepKey { key });
        }
        let fresh = crate::token::new_token();
        store.meta_set(META_KEY, &fresh).await?;
        Ok(StepKey { key: hex::decode(&fresh).expect("new_token is hex") })
    }

    /// A key for tests.
    #[cfg(test)]
    pub fn from_bytes(key: &[u8]) -> StepKey {
        StepKey { key: key.to_vec() }
    }

    fn mac(&self, job: JobId, attempt: u32) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("hmac takes any key length");
        mac.update(format!("berth-step:{job}:{attempt}").as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }

    /// The token of attempt `attempt` of job `job`.
    pub fn mint(&self, job: JobId, attempt: u32) -> String {
        format!("{PREFIX}{job}_{attempt}_{}", self.mac(job, attempt))
    }

    /// The job and attempt a token was made for, if this key made it (compared in constant
    /// time).
    pub fn verify(&self, token: &str) -> Option<(JobId, u32)> {
        let rest = token.strip_prefix(PREFIX)?;
        let mut parts = rest.splitn(3, '_');
        let job: JobId = parts.next()?.parse().ok()?;
        let attempt: u32 = parts.next()?.parse().ok()?;
        let mac = parts.next()?;
        crate::token::ct_eq(mac.as_bytes(), self.mac(job, attempt).as_bytes()).then_some((job, attempt))
    }
}

/// Whether a bearer token is a step token (by its form; [`StepKey::verify`] says if it is good).
pub fn is_step_token(token: &str) -> bool {
    token.starts_with(PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_verify_only_under_their_key_and_for_their_job() {
        let k = StepKey::from_bytes(&[7; 32]);
        let t = k.mint(42, 3);
        assert!(is_step_token(&t));
        assert_eq!(k.verify(&t), Some((42, 3)));
        assert_eq!(k.mint(42, 3), t, "the same token on every StartKernel of the attempt");
        assert_ne!(k.mint(42, 4), t);
        assert_eq!(StepKey::from_bytes(&[8; 32]).verify(&t), None);
        // Another job's number with this job's mac.
        let forged = t.replacen("_42_", "_43_", 1);
        assert_eq!(k.verify(&forged), None);
        for bad in ["", "bstep_", "bstep_42_3", "bstep_x_3_00", "bstep_42_3_", &t[..t.len() - 1]] {
            assert_eq!(k.verify(bad), None, "{bad}");
        }
        assert!(!is_step_token("0123abcd"));
    }
}
