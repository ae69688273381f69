//! vko sidecar.

fn main() -> anyhow::Result<()> {
    Ok(())
}
