//! Which hook backend a run of the tests forces, and what observer's lines must then say: the
//! VM tests run the same tests once per backend (`OBSERVER_TEST_HOOKS`), and slower
//! (`OBSERVER_TEST_SLOWDOWN`).

use serde_json::Value;

use crate::is_change;

/// The hook backend the tests force with `--hooks`, from OBSERVER_TEST_HOOKS (`fentry`, `kprobe`,
/// `tracepoint`); unset: observer chooses (`auto`) and the host's kernel gives tracepoints.
pub fn forced_hooks() -> Option<String> {
    std::env::var("OBSERVER_TEST_HOOKS")
        .ok()
        .filter(|v| !v.is_empty() && v != "auto")
}

/// The backend the x_tables hook went on when the forced one refused that hook alone (fentry
/// on 5.10), as the first ready line that said so named it.
static XT_FALLBACK: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Keeps where the x_tables hook went (see [`xt_fallback`]) for the rest of the run; true the
/// first time only.
pub(crate) fn record_xt_fallback(on: String) -> bool {
    XT_FALLBACK.set(on).is_ok()
}

/// The `source` every legacy change must carry in this run.
pub fn legacy_source() -> String {
    XT_FALLBACK
        .get()
        .cloned()
        .or_else(forced_hooks)
        .unwrap_or_else(|| "tracepoint".into())
}

/// The backend of the hooks other than x_tables in this run (refusals, generations): the forced
/// one, else the host kernel's tracepoints.
pub fn hooks_source() -> String {
    forced_hooks().unwrap_or_else(|| "tracepoint".into())
}

/// Where the x_tables hook went when `forced` refused it alone: the ready line's `hooks` puts it
/// on another backend with `(x_tables: FORCED refused: REASON)`, and every other hook on
/// `forced`. `None` when it is on `forced`, or when the line says anything else.
pub fn xt_fallback(hooks: &str, forced: &str) -> Option<String> {
    let on = hooks.strip_prefix("x_tables=")?.split(' ').next()?;
    let others_on_forced = [
        "namespaces",
        "umount",
        "nf_writers",
        "nft_gens",
        "nf_refusals",
    ]
    .iter()
    .all(|h| hooks.contains(&format!(" {h}={forced}")));
    (on != forced && others_on_forced && hooks.contains(&format!("(x_tables: {forced} refused: ")))
        .then(|| on.to_string())
}

/// How many times longer than on real hardware to wait for a change: OBSERVER_TEST_SLOWDOWN
/// (a guest under software emulation is much slower), default 1.
pub fn slowdown() -> u64 {
    std::env::var("OBSERVER_TEST_SLOWDOWN")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n >= 1)
        .unwrap_or(1)
}

/// A change line of the legacy backend must name the backend that is expected to see it.
pub(crate) fn check_legacy_source(v: &Value) {
    if is_change(v) && v["backend"] == "legacy" {
        assert_eq!(
            v["source"].as_str(),
            Some(legacy_source().as_str()),
            "legacy change from the wrong hook backend: {v}"
        );
    }
}
