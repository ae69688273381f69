//! `cargo xtask test` (being built in this session).

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("cargo xtask test is not built yet")
}
