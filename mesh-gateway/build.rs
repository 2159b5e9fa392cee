//! Generates the gRPC binding's Rust code (package `lf.a2a.v1`) from `proto/a2a.proto`.
//!
//! No protoc: `protox` (a protobuf compiler in Rust) parses the vendored protos into a
//! `FileDescriptorSet` (its own copies of the google/protobuf well-known types, the google/api
//! files from `proto/google/api`), and `tonic-build` turns it into prost messages and the
//! tonic server. The client is generated for the crate's tests, and for everyone with the
//! `grpc-client` feature (`mesh_gateway::grpc_client`; no transport: the caller brings its
//! channel).

use std::path::Path;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto_dir = Path::new("proto");
    let main_file = proto_dir.join("a2a.proto");
    for file in [
        "a2a.proto",
        "google/api/annotations.proto",
        "google/api/client.proto",
        "google/api/field_behavior.proto",
        "google/api/http.proto",
        "google/api/launch_stage.proto",
    ] {
        println!("cargo:rerun-if-changed=proto/{file}");
    }
    // Only a2a.proto's own descriptor goes to the generator: the google/api files carry
    // options alone (no types a2a.proto uses), and google/protobuf maps to prost-types.
    let fds = protox::Compiler::new([proto_dir])?
        .include_imports(false)
        .include_source_info(true)
        .open_file(&main_file)?
        .file_descriptor_set();
    // Cargo sets CARGO_FEATURE_<NAME> for each enabled feature (and reruns this script when
    // the features change).
    let client_for_all = std::env::var_os("CARGO_FEATURE_GRPC_CLIENT").is_some();
    let mut builder = tonic_build::configure()
        .build_server(true)
        .build_client(true)
        .build_transport(false)
        .emit_rerun_if_changed(false);
    if !client_for_all {
        builder = builder.client_mod_attribute("lf.a2a.v1", "#[cfg(test)]");
    }
    builder.compile_fds(fds)?;
    Ok(())
}
