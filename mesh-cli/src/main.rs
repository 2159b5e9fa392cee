//! `mesh`: bring up a local mesh with one command, run each part alone, and talk to it.

use clap::Parser;

/// Agent meshes over MQTT: A2A agents on a broker, an HTTP gateway in front.
#[derive(Parser)]
#[command(name = "mesh", version)]
struct Cli {}

fn main() {
    let _cli = Cli::parse();
}
