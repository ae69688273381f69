//! vko observer.

fn main() -> anyhow::Result<()> {
    Ok(())
}
