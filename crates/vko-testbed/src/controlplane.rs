//! (grows in the testbed issue)

/// Entry point of `vko-testbed serve`.
pub fn serve_main(_args: &[String]) -> crate::Result<()> {
    Err(crate::Error::Other("serve is not built yet".into()))
}
