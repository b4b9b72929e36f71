//! The real firewall managers' surroundings: a D-Bus system bus of the test's own, a private
//! mount namespace with the program's configuration bound over the system's (and, for legacy,
//! every iptables tool the legacy one), and Debian's firewalld run in them inside a namespace.
//! Nothing reaches the machine's own bus, configuration or ruleset.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::Netns;

/// A system bus of the test's own (`dbus-daemon`), so that firewalld and firewall-cmd talk to
/// each other and to nobody else.
pub struct Bus {
    pub address: String,
    pid: i32,
}

impl Bus {
    pub fn start(dir: &Path) -> Bus {
        let sock = dir.join("bus.sock");
        let conf = dir.join("bus.conf");
        std::fs::write(
            &conf,
            format!(
                "<!DOCTYPE busconfig PUBLIC \"-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN\" \
                 \"http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd\">\n\
                 <busconfig><type>system</type><listen>unix:path={}</listen><auth>EXTERNAL</auth>\
                 <policy context=\"default\"><allow send_destination=\"*\" eavesdrop=\"true\"/>\
                 <allow eavesdrop=\"true\"/><allow own=\"*\"/><allow user=\"*\"/></policy>\
                 </busconfig>\n",
                sock.display()
            ),
        )
        .expect("write the bus config");
        let out = Command::new("dbus-daemon")
            .arg(format!("--config-file={}", conf.display()))
            .args(["--fork", "--print-pid"])
            .output()
            .expect("run dbus-daemon");
        assert!(out.status.success(), "dbus-daemon: {out:?}");
        let pid = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("dbus-daemon pid");
        Bus {
            address: format!("unix:path={}", sock.display()),
            pid,
        }
    }
}

impl Drop for Bus {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.pid),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
}

/// `sh -c` of what sets up a private mount namespace for a real program: its own /run, these
/// directories bound over the system's, the namespace's /sys, and with `legacy` every iptables
/// tool the legacy one (Debian's `iptables` is iptables-nft). Run it under `unshare --mount`.
pub fn private_mounts(binds: &[(&Path, &str)], legacy: bool) -> String {
    let mut s = String::from("mount -t tmpfs tmpfs /run && ");
    for (from, to) in binds {
        s.push_str(&format!("mount --bind {} {to} && ", from.display()));
    }
    s.push_str("mount -t sysfs sysfs /sys && ");
    if legacy {
        s.push_str("mount --bind /usr/sbin/xtables-legacy-multi /usr/sbin/xtables-nft-multi && ");
    }
    s
}

/// A command in `ns` and a private mount namespace (see [`private_mounts`]).
pub fn in_private_mounts(ns: &Netns, setup: &str, command: &str) -> Command {
    let mut c = Command::new("unshare");
    c.args(["--mount", "--propagation", "private", "nsenter"])
        .arg(format!("--net=/run/netns/{}", ns.name()))
        .args(["sh", "-c", &format!("{setup}{command}")]);
    c
}

/// A copy of a system directory the program writes, in `dir`.
pub fn copy_dir(from: &str, dir: &Path, name: &str) -> PathBuf {
    let to = dir.join(name);
    let ok = Command::new("cp")
        .args(["-a", from, to.to_str().expect("utf-8")])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "copy {from}");
    to
}

/// firewalld in `ns`, with `FirewallBackend=backend`; with `legacy`, every iptables tool in its
/// mount namespace is the legacy one (Debian's `iptables` is iptables-nft).
pub struct Firewalld {
    child: Child,
    pub bus: Bus,
    _dir: tempfile::TempDir,
    log: PathBuf,
}

impl Firewalld {
    pub fn start(ns: &Netns, backend: &str, legacy: bool) -> Firewalld {
        let dir = tempfile::tempdir().expect("tempdir");
        let bus = Bus::start(dir.path());
        Firewalld::start_on(ns, backend, legacy, dir, bus)
    }

    /// firewalld on a bus started beforehand (in `dir`), so that observer can watch the bus
    /// from firewalld's start.
    pub fn start_on(
        ns: &Netns,
        backend: &str,
        legacy: bool,
        dir: tempfile::TempDir,
        bus: Bus,
    ) -> Firewalld {
        let etc = copy_dir("/etc/firewalld", dir.path(), "etc");
        std::fs::create_dir_all(dir.path().join("run")).expect("mkdir");
        let conf = etc.join("firewalld.conf");
        let text = std::fs::read_to_string(&conf).expect("firewalld.conf");
        let text: String = text
            .lines()
            .map(|l| {
                if l.starts_with("FirewallBackend=") {
                    format!("FirewallBackend={backend}")
                } else {
                    l.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        std::fs::write(&conf, text + "\n").expect("write firewalld.conf");
        let log = dir.path().join("firewalld.log");
        let setup = private_mounts(&[(&etc, "/etc/firewalld")], legacy);
        let child = in_private_mounts(
            ns,
            &setup,
            &format!(
                "mkdir -p /run/firewalld && exec firewalld --nofork --nopid --log-file {}",
                log.display()
            ),
        )
        .env("DBUS_SYSTEM_BUS_ADDRESS", &bus.address)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start firewalld");
        let fw = Firewalld {
            child,
            bus,
            _dir: dir,
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(40 * crate::slowdown());
        loop {
            if fw.cmd(&["--state"]).is_ok_and(|s| s.contains("running")) {
                return fw;
            }
            assert!(
                Instant::now() < deadline,
                "firewalld did not start: {}",
                std::fs::read_to_string(&fw.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// `firewall-cmd ARGS` on the private bus.
    pub fn cmd(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new("timeout")
            .arg("60")
            .arg("firewall-cmd")
            .args(args)
            .env("DBUS_SYSTEM_BUS_ADDRESS", &self.bus.address)
            .output()
            .map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() {
            Ok(text)
        } else {
            Err(format!("{text}{}", String::from_utf8_lossy(&out.stderr)))
        }
    }

    pub fn must(&self, args: &[&str]) {
        if let Err(e) = self.cmd(args) {
            panic!("firewall-cmd {args:?}: {e}");
        }
    }
}

impl Drop for Firewalld {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
