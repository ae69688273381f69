//! Project automation: `cargo xtask gen-crd | testbed | test | bench`.

fn main() -> anyhow::Result<()> {
    Ok(())
}
