//! The dataset cache (DESIGN.md §10): not built yet; it arrives with the dataset-cache issue.
