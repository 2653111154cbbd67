//! Web apps a job serves (`--app NAME=PORT`, `--jupyter`, `--tensorboard DIR`), reached through
//! the manager's app proxy at `/apps/<job>/<name>/`.
//!
//! An app is a name and a TCP port inside the job's main kernel. A preset's port is left to
//! the agent, which picks a free one when the kernel starts and tells the kernel in
//! `BERTH_APP_<NAME>_PORT`, so two notebooks on one node never collide. Jupyter also gets a
//! secret of its own (`JUPYTER_TOKEN`, from the agent) that the proxy adds to every request:
//! the notebook is closed to anyone who reaches its port on the node directly, while users
//! never see a token (berth authenticates them).
//!
//! An app gets its requests with the `/apps/<job>/<name>/` prefix kept (it is told its base
//! URL in `BERTH_APP_<NAME>_BASE_URL`, as Jupyter and TensorBoard are), or, for a server that
//! knows no base URL (`python -m http.server`), with it stripped (`--app NAME=PORT,strip`).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The most apps one job may declare.
pub const MAX_APPS: usize = 16;

/// What kind of app it is (how berth starts it and talks to it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum AppKind {
    /// Something the job starts itself on the port (`--app NAME=PORT`).
    #[default]
    Custom,
    /// JupyterLab, started by berth (`--jupyter`), authenticated by a token the proxy adds.
    Jupyter,
    /// TensorBoard, started by berth (`--tensorboard DIR`).
    Tensorboard,
}

/// Which path an app's requests reach it with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum AppPath {
    /// As the browser asked for it, `/apps/<job>/<name>/...`: for apps that serve under the
    /// base URL they are told (`BERTH_APP_<NAME>_BASE_URL`).
    #[default]
    Keep,
    /// Without the `/apps/<job>/<name>` prefix, `/...` (`--app NAME=PORT,strip`): for servers
    /// that know no base URL. Their pages' links must be relative (a link to `/x` leaves the
    /// app); a redirect to `/x` is sent back with the prefix put in.
    Strip,
}

impl AppPath {
    /// The option that asks for it (`--app NAME=PORT,<option>`).
    pub fn as_str(self) -> &'static str {
        match self {
            AppPath::Keep => "keep",
            AppPath::Strip => "strip",
        }
    }

    fn is_keep(&self) -> bool {
        *self == AppPath::Keep
    }
}

/// An app a job serves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AppSpec {
    /// Its name in URLs: lowercase letters, digits and `-`, at most 32.
    pub name: String,
    /// The port it listens on inside the main kernel; `None`: picked by the agent at start
    /// (`BERTH_APP_<NAME>_PORT`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    #[serde(default)]
    pub kind: AppKind,
    /// Whether the proxy keeps or strips the `/apps/<job>/<name>` prefix.
    #[serde(default, skip_serializing_if = "AppPath::is_keep")]
    pub path: AppPath,
}

impl AppSpec {
    /// An app the job starts itself on `port` (or on the port the agent picks), its prefix kept.
    pub fn custom(name: impl Into<String>, port: Option<u16>) -> AppSpec {
        AppSpec { name: name.into(), port, kind: AppKind::Custom, path: AppPath::Keep }
    }
}

/// The variable that holds app `name`'s port in the kernel (`BERTH_APP_<NAME>_PORT`).
pub fn port_var(name: &str) -> String {
    format!("BERTH_APP_{}_PORT", name.to_ascii_uppercase().replace('-', "_"))
}

/// The variable that holds app `name`'s URL path (`BERTH_APP_<NAME>_BASE_URL`).
pub fn base_url_var(name: &str) -> String {
    format!("BERTH_APP_{}_BASE_URL", name.to_ascii_uppercase().replace('-', "_"))
}

/// The variable that holds the secret the proxy sends to token-authenticated apps.
pub const TOKEN_VAR: &str = "BERTH_APP_TOKEN";

/// The path app `name` of job `job` is served at, with its trailing `/`.
pub fn base_path(job: i64, name: &str) -> String {
    format!("/apps/{job}/{name}/")
}

/// The host name label of app `name` of job `job` (`7-jupyter`): each app is served on a
/// host of its own, so apps share no origin with each other or with the dashboard.
pub fn host_label(job: i64, name: &str) -> String {
    format!("{job}-{name}")
}

/// Checks an app's name (URL-safe, short).
pub fn valid_app_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 32
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "invalid app name `{name}`: use lowercase letters, digits and `-`, starting with a letter, at most 32"
        ))
    }
}

/// Parses `--app NAME=PORT[,OPTION]`; the options: `strip` (the proxy takes the
/// `/apps/<job>/<name>` prefix off) and `keep` (the default: the app gets the full path).
pub fn parse_app(text: &str) -> Result<AppSpec, String> {
    let Some((name, rest)) = text.split_once('=') else {
        return Err(format!("invalid app `{text}`: expected NAME=PORT[,strip], e.g. --app web=8000"));
    };
    valid_app_name(name)?;
    let mut parts = rest.split(',');
    let port = parts.next().unwrap_or_default();
    let port: u16 = port
        .parse()
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| format!("invalid port `{port}` for app `{name}`: expected 1 to 65535"))?;
    let mut app = AppSpec::custom(name, Some(port));
    for option in parts {
        app.path = match option {
            "strip" => AppPath::Strip,
            "keep" => AppPath::Keep,
            other => {
                return Err(format!(
                    "invalid option `{other}` for app `{name}`: use `strip` (the app gets `/...` without the \
                     /apps/JOB/{name} prefix) or `keep` (the full path, the default), e.g. --app {name}={port},strip"
                ));
            }
        };
    }
    Ok(app)
}

/// `path_and_query` of a request to app `name` of job `job` as an app that strips the prefix
/// gets it: `/apps/7/web/x?q=1` is `/x?q=1`; a path outside the app is left alone.
pub fn strip_base(job: i64, name: &str, path_and_query: &str) -> String {
    let base = base_path(job, name);
    match path_and_query.strip_prefix(base.trim_end_matches('/')) {
        Some(rest) if rest.starts_with('/') => rest.to_string(),
        Some(rest) if rest.is_empty() || rest.starts_with('?') => format!("/{rest}"),
        _ => path_and_query.to_string(),
    }
}

/// Checks a job's apps: valid, distinct names, not too many.
pub fn check_apps(apps: &[AppSpec]) -> Result<(), String> {
    if apps.len() > MAX_APPS {
        return Err(format!("a job may serve at most {MAX_APPS} apps, not {}", apps.len()));
    }
    for (i, a) in apps.iter().enumerate() {
        valid_app_name(&a.name)?;
        if apps[..i].iter().any(|b| b.name == a.name) {
            return Err(format!("app `{}` is declared twice: give each app its own name", a.name));
        }
        if a.port == Some(0) {
            return Err(format!("app `{}` has port 0: give a port from 1 to 65535, or none", a.name));
        }
    }
    Ok(())
}

/// The shell line that starts a preset app, reading its port and path from the environment.
pub fn preset_line(app: &AppSpec, tensorboard_dir: Option<&str>) -> Option<String> {
    let (port, base) = (port_var(&app.name), base_url_var(&app.name));
    match app.kind {
        AppKind::Custom => None,
        // The token comes from `JUPYTER_TOKEN` (never on a command line); the proxy sends it.
        // `allow_remote_access`: the proxied Host is the manager's, which Jupyter would refuse.
        // Jupyter refuses root unless told: a job of root's is root's own choice.
        AppKind::Jupyter => Some(format!(
            "jupyter lab --no-browser --ip=127.0.0.1 --port=\"${port}\" --ServerApp.base_url=\"${base}\" \
             --ServerApp.allow_remote_access=True --ServerApp.password='' \
             $([ \"$(id -u)\" = 0 ] && echo --allow-root)"
        )),
        AppKind::Tensorboard => Some(format!(
            "tensorboard --logdir {} --host 127.0.0.1 --port \"${port}\" --path_prefix \"${{{base}%/}}\"",
            shell_words::quote(tensorboard_dir.unwrap_or("."))
        )),
    }
}

/// The command of a job with preset apps: the presets in the background and `command` in the
/// foreground, or the last preset itself when there is no command.
pub fn wrap_command(presets: &[String], command: &[String]) -> Vec<String> {
    if presets.is_empty() {
        return command.to_vec();
    }
    let mut script = String::new();
    let (background, last) = if command.is_empty() { presets.split_at(presets.len() - 1) } else { (presets, &[][..]) };
    for p in background {
        script.push_str(p);
        script.push_str(" &\n");
    }
    match last.first() {
        Some(p) => script.push_str(&format!("exec {p}")),
        None => script.push_str("exec \"$@\""),
    }
    let mut argv = vec!["sh".to_string(), "-c".to_string(), script, "sh".to_string()];
    argv.extend(command.iter().cloned());
    argv
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn app_flags_parse_and_are_checked() {
        assert_eq!(parse_app("web=8000").unwrap(), AppSpec::custom("web", Some(8000)));
        assert_eq!(parse_app("web=8000,strip").unwrap().path, AppPath::Strip);
        assert_eq!(parse_app("web=8000,keep").unwrap().path, AppPath::Keep);
        let bad = parse_app("web=8000,nope").unwrap_err();
        assert!(bad.contains("invalid option `nope`") && bad.contains("`strip`") && bad.contains("`keep`"), "{bad}");
        assert!(parse_app("web=x,strip").unwrap_err().contains("1 to 65535"));
        assert!(parse_app("web").unwrap_err().contains("NAME=PORT"));
        assert!(parse_app("web=0").unwrap_err().contains("1 to 65535"));
        assert!(parse_app("Web=80").unwrap_err().contains("invalid app name"));
        assert!(parse_app("a/b=80").is_err());
        let two = vec![parse_app("a=1").unwrap(), parse_app("a=2").unwrap()];
        assert!(check_apps(&two).unwrap_err().contains("twice"));
        assert_eq!(port_var("my-app"), "BERTH_APP_MY_APP_PORT");
        assert_eq!(base_path(7, "jupyter"), "/apps/7/jupyter/");
    }

    #[test]
    fn stripped_apps_get_paths_from_their_root() {
        assert_eq!(strip_base(7, "web", "/apps/7/web/x/y.txt?q=1"), "/x/y.txt?q=1");
        assert_eq!(strip_base(7, "web", "/apps/7/web/"), "/");
        assert_eq!(strip_base(7, "web", "/apps/7/web?q"), "/?q");
        assert_eq!(strip_base(7, "web", "/apps/7/webx/"), "/apps/7/webx/");
    }

    #[test]
    fn apps_keeping_their_prefix_store_as_before() {
        let kept = serde_json::to_string(&AppSpec::custom("web", Some(80))).unwrap();
        assert_eq!(kept, r#"{"name":"web","port":80,"kind":"custom"}"#);
        let strip = AppSpec { path: AppPath::Strip, ..AppSpec::custom("web", Some(80)) };
        let back: AppSpec = serde_json::from_str(&serde_json::to_string(&strip).unwrap()).unwrap();
        assert_eq!(back.path, AppPath::Strip);
    }

    #[test]
    fn presets_run_beside_or_as_the_command() {
        let j = AppSpec { kind: AppKind::Jupyter, ..AppSpec::custom("jupyter", None) };
        let line = preset_line(&j, None).unwrap();
        assert!(line.contains("$BERTH_APP_JUPYTER_PORT") && !line.contains("token="), "{line}");
        let alone = wrap_command(std::slice::from_ref(&line), &[]);
        assert_eq!(alone[..2], ["sh", "-c"]);
        assert!(alone[2].starts_with("exec jupyter lab"));
        let beside = wrap_command(std::slice::from_ref(&line), &["python".into(), "train.py".into()]);
        assert!(beside[2].ends_with("&\nexec \"$@\""), "{}", beside[2]);
        assert_eq!(beside[3..], ["sh", "python", "train.py"]);
        assert_eq!(wrap_command(&[], &["x".into()]), ["x"]);
        let tb = AppSpec { kind: AppKind::Tensorboard, ..AppSpec::custom("tensorboard", None) };
        assert!(preset_line(&tb, Some("it's")).unwrap().contains(r"'it'\''s'"));
    }
}
