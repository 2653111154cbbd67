//! The user commands, one module each. Each takes its clap `Args` and returns the process exit
//! code, so that `submit --wait` and `cancel` can report partial failure without an error.

pub mod admin;
pub mod apps;
pub mod attach;
pub mod backup;
pub mod cache;
pub mod cache_admin;
pub mod cache_client;
pub mod cache_daemon;
pub mod cache_warm;
pub mod cancel;
pub mod control_plane;
pub mod eff;
pub mod envs;
pub mod exec;
pub mod follow;
pub mod images;
pub mod login;
pub mod logs;
pub mod nodes;
pub mod port_forward;
pub mod ps;
pub mod queues;
pub mod quota;
pub mod run;
pub mod show;
pub mod sim;
pub mod sim_plot;
pub mod store;
pub mod stream;
pub mod submit;
pub mod tenancy;
pub mod token;
pub mod ui;
pub mod usage;
pub mod wait;
