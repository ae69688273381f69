//! Prints the generated CRD as YAML (`cargo run -p vko-api --example print_crd`).
use kube::CustomResourceExt;

fn main() -> Result<(), serde_norway::Error> {
    print!("{}", serde_norway::to_string(&vko_api::Valkey::crd())?);
    Ok(())
}
