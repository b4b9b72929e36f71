//! What `/proc` says about a process: its CPU time in clock ticks (`/proc/PID/stat`) and its
//! memory figures (`/proc/PID/status`); and what `getrusage` says of this process's own CPU
//! time and its reaped children's.

use std::fs;

use anyhow::{bail, Context as _, Result};

/// Linux's USER_HZ, the unit of utime and stime in /proc/PID/stat (100 on every architecture
/// observer runs on).
pub(crate) const USER_HZ: u64 = 100;

/// The sum of fields `fields` (numbered as in proc(5): utime 14, stime 15, cutime 16, cstime
/// 17) of `/proc/PID/stat`, in clock ticks.
pub(crate) fn stat_ticks(pid: u32, fields: [usize; 2]) -> Result<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat (did the process exit?)"))?;
    // Fields after "(comm)", which may hold spaces: state is field 3.
    let after = stat.rsplit_once(')').map_or("", |(_, a)| a);
    let values: Vec<&str> = after.split_whitespace().collect();
    fields.iter().try_fold(0, |sum, &n| {
        values
            .get(n - 3)
            .and_then(|f| f.parse::<u64>().ok())
            .map(|v| sum + v)
            .with_context(|| format!("/proc/{pid}/stat has no field {n}: {stat}"))
    })
}

pub(crate) fn status_kib(pid: u32, key: &str) -> Result<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .with_context(|| format!("/proc/{pid}/status has no {key}"))
}

/// The user + system CPU time `getrusage(who)` gives (`RUSAGE_SELF`, `RUSAGE_CHILDREN`), in ms.
pub(crate) fn rusage_cpu_ms(who: libc::c_int) -> Result<f64> {
    // SAFETY: rusage is plain data; zero is a valid value of each field.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into the struct it is given and nothing else.
    if unsafe { libc::getrusage(who, &mut ru) } != 0 {
        bail!("getrusage({who}): {}", std::io::Error::last_os_error());
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3;
    Ok(tv(ru.ru_utime) + tv(ru.ru_stime))
}

#[cfg(test)]
mod tests {
    use std::process;

    use super::*;

    #[test]
    fn stat_fields_are_read_by_their_proc5_numbers() {
        let me = process::id();
        // utime + stime of this process, and of its reaped children: both present.
        assert!(stat_ticks(me, [14, 15]).is_ok());
        assert!(stat_ticks(me, [16, 17]).is_ok());
        // Field 4 is the parent's pid.
        let ppid = u64::from(std::os::unix::process::parent_id());
        assert_eq!(stat_ticks(me, [4, 3 + 100]).ok(), None);
        assert_eq!(stat_ticks(me, [4, 4]).unwrap(), 2 * ppid);
    }
}
