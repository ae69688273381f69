//! (grows in the testbed issue)

/// Entry point of `vko-testbed shim`.
pub fn shim_main(_args: &[String]) -> crate::Result<()> {
    Err(crate::Error::Other("shim is not built yet".into()))
}
