//! GPU types, as Slurm's `--gres=gpu:a100:2` and `--gpus=a100:2` name them.
//!
//! berth matches a GPU type as a node feature (`berth_model::constraint`): a node offers type
//! `a100` when its label `gpu-type` says `a100`. An admin may set that label
//! (`berth agent --label gpu-type=a100`); otherwise the agent derives it from its GPUs' model
//! names (`NVIDIA A100-SXM4-80GB` is `a100`), when all of them are of one type. A request for a
//! type becomes the feature `gpu-type=TYPE` beside the job's other features, so a type no node
//! offers is refused at submit, like any constraint.

use std::collections::BTreeMap;

use crate::Gpu;

/// The label that says a node's GPU type.
pub const LABEL: &str = "gpu-type";

/// Words of model names that say nothing of the type: vendors, brands, form factors, memory
/// (and berth's own, of its fake GPUs: `berth fake GPU` is `fake`).
const NOISE: &[&str] = &[
    "nvidia", "tesla", "geforce", "quadro", "gpu", "pcie", "sxm", "sxm2", "sxm3", "sxm4", "sxm5", "nvl", "hbm3",
    "hbm3e", "berth",
];

/// The type of a GPU from its model name, lowercase: the words left once vendors, form
/// factors and memory sizes are dropped, joined (`NVIDIA GeForce RTX 4090` is `rtx4090`);
/// `None` when nothing is left.
pub fn of_model(model: &str) -> Option<String> {
    let lower = model.to_ascii_lowercase();
    let words = lower
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty() && !NOISE.contains(w))
        .filter(|w| !(w.ends_with("gb") && w[..w.len() - 2].bytes().all(|b| b.is_ascii_digit())));
    let t: String = words.collect();
    (!t.is_empty()).then_some(t)
}

/// `labels` with `gpu-type` added from `gpus`' models, unless an admin set it or the GPUs
/// are of several types (then only a label can say which type the node counts as).
pub fn with_derived_label(labels: &BTreeMap<String, String>, gpus: &[Gpu]) -> BTreeMap<String, String> {
    let mut out = labels.clone();
    if out.contains_key(LABEL) {
        return out;
    }
    let mut types = gpus.iter().map(|g| of_model(&g.model));
    if let Some(Some(first)) = types.next()
        && types.all(|t| t.as_deref() == Some(first.as_str()))
        && crate::constraint::valid_label(&first)
    {
        out.insert(LABEL.into(), first);
    }
    out
}

/// The feature that asks for GPU type `t` (any case): `gpu-type=a100`.
pub fn feature(t: &str) -> Result<String, String> {
    let t = t.to_ascii_lowercase();
    if !crate::constraint::valid_label(&t) {
        return Err(format!("invalid GPU type `{t}`: use letters, digits, `-`, `_` or `.` (a100, h100, rtx4090)"));
    }
    Ok(format!("{LABEL}={t}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(model: &str) -> Gpu {
        Gpu { uuid: "GPU-1".into(), index: 0, model: model.into(), mem_bytes: 1 << 30, numa: None }
    }

    #[test]
    fn types_from_model_names() {
        for (model, t) in [
            ("NVIDIA A100-SXM4-80GB", "a100"),
            ("NVIDIA A100-PCIE-40GB", "a100"),
            ("NVIDIA H100 80GB HBM3", "h100"),
            ("Tesla V100-SXM2-16GB", "v100"),
            ("NVIDIA GeForce RTX 4090", "rtx4090"),
            ("NVIDIA L40S", "l40s"),
            ("berth fake GPU", "fake"),
        ] {
            assert_eq!(of_model(model).as_deref(), Some(t), "{model}");
        }
        assert_eq!(of_model("NVIDIA GPU"), None);
    }

    #[test]
    fn the_label_is_derived_only_where_the_gpus_agree_and_no_admin_set_it() {
        let none = BTreeMap::new();
        let a100 = [gpu("NVIDIA A100-SXM4-80GB"), gpu("NVIDIA A100-SXM4-80GB")];
        assert_eq!(with_derived_label(&none, &a100).get(LABEL).map(String::as_str), Some("a100"));
        assert!(!with_derived_label(&none, &[gpu("NVIDIA A100-SXM4-80GB"), gpu("Tesla V100")]).contains_key(LABEL));
        assert!(!with_derived_label(&none, &[]).contains_key(LABEL), "no GPUs, no type");
        let set = BTreeMap::from([(LABEL.to_string(), "a100-80g".to_string())]);
        assert_eq!(with_derived_label(&set, &a100)[LABEL], "a100-80g", "the admin's label stands");
    }

    #[test]
    fn a_type_is_a_feature() {
        assert_eq!(feature("A100").unwrap(), "gpu-type=a100");
        assert!(feature("a100 x").unwrap_err().contains("invalid GPU type `a100 x`"));
    }
}
