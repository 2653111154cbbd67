//! `berth images`: the container images each node has (what jobs with `--image` can run on),
//! nodes that pull missing images, and nodes whose Docker is down.

use std::process::ExitCode;

use berth_model::api::ImagesView;
use clap::Args;

use crate::output::{self, OutputArgs};

#[derive(Debug, Args)]
pub struct ImagesArgs {
    #[command(flatten)]
    pub output: OutputArgs,
}

pub async fn run(args: ImagesArgs) -> anyhow::Result<ExitCode> {
    let view = crate::client::from_env()?.images().await?;
    if args.output.json() {
        output::print_json(&view)?;
        return Ok(ExitCode::SUCCESS);
    }
    print!("{}", render(&view));
    Ok(ExitCode::SUCCESS)
}

fn render(v: &ImagesView) -> String {
    let mut out = String::new();
    if v.images.is_empty() {
        out.push_str("no images on any ready node: load one with `docker load` or `docker pull` on a node\n");
    } else {
        let mut t = output::table(["IMAGE", "NODES"]);
        for i in &v.images {
            t.add_row([i.image.clone(), i.nodes.join(",")]);
        }
        out.push_str(&output::render_table(t));
    }
    if !v.pulling_nodes.is_empty() {
        out.push_str(&format!("nodes that pull missing images: {}\n", v.pulling_nodes.join(", ")));
    }
    for d in &v.docker_down {
        out.push_str(&format!("docker is not usable on {}: {}\n", d.node, d.error));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_model::api::{DockerDown, ImageView};

    #[test]
    fn images_with_their_nodes_and_docker_down() {
        let v = ImagesView {
            images: vec![ImageView { image: "pytorch:2.4".into(), nodes: vec!["n1".into(), "n2".into()] }],
            pulling_nodes: vec![],
            docker_down: vec![DockerDown { node: "n3".into(), error: "cannot reach the Docker daemon".into() }],
        };
        let s = render(&v);
        assert!(s.lines().nth(1).unwrap().contains("pytorch:2.4") && s.contains("n1,n2"), "{s}");
        assert!(s.contains("docker is not usable on n3: cannot reach the Docker daemon"), "{s}");
        assert!(render(&ImagesView::default()).starts_with("no images on any ready node"));
    }
}
