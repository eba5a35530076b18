//! Compiles `proto/quotes.proto` with protox (a protobuf compiler in Rust: no `protoc` to
//! install) and generates the tonic server and client from it.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/quotes.proto");
    let descriptors = protox::compile(["proto/quotes.proto"], ["proto"])?;
    tonic_prost_build::configure().compile_fds(descriptors)?;
    Ok(())
}
