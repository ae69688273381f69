//! vko operator.

fn main() -> anyhow::Result<()> {
    Ok(())
}
