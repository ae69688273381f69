//! (grows in the testbed issue)
