//! Empty library target: `observer` lists this crate as a build-dependency so that cargo re-runs
//! its build script (which compiles the eBPF binary) when the programs change.
#![no_std]
