//! Setup's Debian packages: the binaries that show each package is there, and `apt-get install`
//! of the missing ones (as root, with maintainer scripts kept from starting services on this
//! machine; optional ones only when the apt sources have them).

use std::{path::PathBuf, process::Command};

use anyhow::{bail, Context as _, Result};

use super::Options;
use crate::cmd::{self, describe};

/// A Debian package and the binaries that show it is installed.
struct DebPackage {
    name: &'static str,
    binaries: &'static [&'static str],
    /// Installed when the configured apt sources have it; otherwise only reported.
    optional: bool,
}

const DEB_PACKAGES: &[DebPackage] = &[
    DebPackage {
        name: "nftables",
        binaries: &["nft"],
        optional: false,
    },
    DebPackage {
        name: "iptables",
        binaries: &[
            "iptables",
            "iptables-legacy",
            "ip6tables-legacy",
            "iptables-nft",
        ],
        optional: false,
    },
    // arp_tables and ebtables (the legacy tools; their tests compare with the *-legacy-save).
    DebPackage {
        name: "arptables",
        binaries: &["arptables-legacy", "arptables-legacy-save"],
        optional: false,
    },
    DebPackage {
        name: "ebtables",
        binaries: &["ebtables-legacy", "ebtables-legacy-save"],
        optional: false,
    },
    DebPackage {
        name: "iproute2",
        binaries: &["ip"],
        optional: false,
    },
    DebPackage {
        name: "ipset",
        binaries: &["ipset"],
        optional: false,
    },
    // The CNI plugins (bridge, portmap) whose hostPort chains the restore tests put back.
    DebPackage {
        name: "containernetworking-plugins",
        binaries: &["/usr/lib/cni/bridge", "/usr/lib/cni/portmap"],
        optional: false,
    },
    // The restore tests send a packet with a mark (`ping -m`) to see a DROP rule work again.
    DebPackage {
        name: "iputils-ping",
        binaries: &["ping"],
        optional: false,
    },
    // `-m nfacct`: the accounting objects its rules name (created in the tests' namespaces).
    DebPackage {
        name: "nfacct",
        binaries: &["nfacct"],
        optional: false,
    },
    DebPackage {
        name: "bpftool",
        binaries: &["bpftool"],
        optional: true,
    },
    DebPackage {
        name: "procps",
        binaries: &["ps", "pgrep"],
        optional: false,
    },
    // The live tail's tests run it in a real terminal.
    DebPackage {
        name: "tmux",
        binaries: &["tmux"],
        optional: false,
    },
    // The real firewall managers the incident tests run beside observer (in namespaces of the
    // tests' own, on a private bus; never as services of this machine: see `no_service_starts`).
    DebPackage {
        name: "firewalld",
        binaries: &["firewalld", "firewall-cmd"],
        optional: false,
    },
    DebPackage {
        name: "ufw",
        binaries: &["ufw"],
        optional: false,
    },
    DebPackage {
        name: "fail2ban",
        binaries: &["fail2ban-server", "fail2ban-client"],
        optional: false,
    },
    DebPackage {
        name: "docker.io",
        binaries: &["dockerd"],
        optional: false,
    },
    // The image of the container the docker test runs (built locally, nothing pulled), and the
    // restore tests' server in a pod (`busybox httpd`). Debian's `busybox` conflicts with it, and
    // the static one has every applet both need.
    DebPackage {
        name: "busybox-static",
        binaries: &["busybox"],
        optional: false,
    },
    DebPackage {
        name: "dbus-daemon",
        binaries: &["dbus-daemon"],
        optional: false,
    },
    // Fleet tests: the JetStream server observer publishes to, the Prometheus that scrapes it
    // (promtool checks the alert rules), and podman, which builds and runs the image.
    DebPackage {
        name: "nats-server",
        binaries: &["nats-server"],
        optional: false,
    },
    DebPackage {
        name: "prometheus",
        binaries: &["prometheus", "promtool"],
        optional: false,
    },
    DebPackage {
        name: "podman",
        binaries: &["podman"],
        optional: false,
    },
    DebPackage {
        name: "binutils",
        binaries: &["strip"],
        optional: false,
    },
];

/// While packages install, keep their maintainer scripts from starting services on this
/// machine (a firewalld started here would rewrite the host's ruleset): the `policy-rc.d`
/// convention, removed again afterwards unless it was there before.
struct NoServiceStarts(Option<PathBuf>);

impl NoServiceStarts {
    fn new() -> NoServiceStarts {
        let path = PathBuf::from("/usr/sbin/policy-rc.d");
        if path.exists() {
            return NoServiceStarts(None);
        }
        let made = std::fs::write(
            &path,
            "#!/bin/sh\n# No service starts while observer's setup installs packages.\nexit 101\n",
        )
        .and_then(|()| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
        });
        NoServiceStarts(made.is_ok().then_some(path))
    }
}

impl Drop for NoServiceStarts {
    fn drop(&mut self) {
        if let Some(p) = &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

pub(super) fn debian_packages(opts: Options) -> Result<()> {
    let mut missing = Vec::new();
    for pkg in DEB_PACKAGES {
        let absent: Vec<&str> = pkg
            .binaries
            .iter()
            .copied()
            .filter(|b| cmd::which(b).is_none())
            .collect();
        if absent.is_empty() {
            println!("ok {} ({})", pkg.binaries.join(", "), pkg.name);
        } else {
            println!("missing {} ({})", absent.join(", "), pkg.name);
            missing.push(pkg);
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = missing.iter().map(|p| p.name).collect();
    let by_hand = format!(
        "apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y \
         --no-install-recommends {}",
        names.join(" ")
    );
    if !cmd::is_root() {
        let msg = format!(
            "missing Debian packages: {}; installing them needs root. Run as root: `{by_hand}` \
             (or `sudo cargo xtask setup`)",
            names.join(", ")
        );
        if opts.lenient_packages {
            println!("warning: {msg}");
            return Ok(());
        }
        bail!(msg);
    }
    if cmd::which("apt-get").is_none() {
        bail!(
            "missing Debian packages: {}, and there is no apt-get here; install their \
             equivalents with this system's package manager",
            names.join(", ")
        );
    }
    println!(
        "installing {} (apt-get update, then apt-get install)",
        names.join(" ")
    );
    cmd::run(
        Command::new("apt-get")
            .args(["update", "-q"])
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )
    .context("`apt-get update` failed; check the apt sources and the network, then re-run")?;

    let mut to_install = Vec::new();
    for pkg in missing {
        if pkg.optional && !apt_has_candidate(pkg.name)? {
            println!(
                "note {} is not in the configured apt sources; skipped (optional)",
                pkg.name
            );
        } else {
            to_install.push(pkg.name);
        }
    }
    if to_install.is_empty() {
        return Ok(());
    }
    let _guard = NoServiceStarts::new();
    let mut install = Command::new("apt-get");
    install
        .args(["install", "-y", "-q", "--no-install-recommends"])
        .args(&to_install)
        .env("DEBIAN_FRONTEND", "noninteractive");
    cmd::run(&mut install).with_context(|| {
        format!(
            "installing Debian packages failed; try by hand: `{}`",
            describe(&install)
        )
    })?;
    for name in &to_install {
        let pkg = DEB_PACKAGES.iter().find(|p| p.name == *name);
        if let Some(bin) = pkg.and_then(|p| p.binaries.iter().find(|b| cmd::which(b).is_none())) {
            bail!("`{bin}` is still missing after installing the Debian package {name}");
        }
        println!("ok installed {name}");
    }
    Ok(())
}

fn apt_has_candidate(pkg: &str) -> Result<bool> {
    let policy = cmd::output(Command::new("apt-cache").args(["policy", pkg]))
        .with_context(|| format!("asking apt whether it has {pkg}"))?;
    Ok(policy
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Candidate:"))
        .any(|c| c.trim() != "(none)"))
}

/// Where setup unpacks Debian's netfilter-persistent, iptables-persistent and ipset-persistent:
/// they cannot be installed beside ufw (which breaks them), and the attribution and restore
/// tests run their scripts from here (a dispatcher, `run-parts`, running plugins), in
/// namespaces of their own.
pub const UNPACKED_NETFILTER_PERSISTENT: &str = "/var/cache/observer-tests/netfilter-persistent";

/// The packages unpacked there.
const PERSISTENT_PACKAGES: &[&str] = &[
    "netfilter-persistent",
    "iptables-persistent",
    "ipset-persistent",
];

/// Unpack (`apt-get download`, `dpkg-deb -x`; never installed) [`PERSISTENT_PACKAGES`] into
/// [`UNPACKED_NETFILTER_PERSISTENT`], unless they are there.
pub(super) fn unpacked_packages(opts: Options) -> Result<()> {
    let root = PathBuf::from(UNPACKED_NETFILTER_PERSISTENT);
    let script = root.join("usr/sbin/netfilter-persistent");
    let plugins = root.join("usr/share/netfilter-persistent/plugins.d");
    let plugin = plugins.join("15-ip4tables");
    let ipset_plugin = plugins.join("40-ipset");
    let names = PERSISTENT_PACKAGES.join(", ");
    if script.exists() && plugin.exists() && ipset_plugin.exists() {
        println!("ok {names} (unpacked in {})", root.display());
        return Ok(());
    }
    let by_hand = format!(
        "cd $(mktemp -d) && apt-get download {} && for d in *.deb; do dpkg-deb -x $d {}; done",
        PERSISTENT_PACKAGES.join(" "),
        root.display()
    );
    if !cmd::is_root() || cmd::which("apt-get").is_none() || cmd::which("dpkg-deb").is_none() {
        let msg = format!(
            "{names} are not unpacked in {}; as root, with apt: `{by_hand}`",
            root.display()
        );
        if opts.lenient_packages {
            println!("warning: {msg}");
            return Ok(());
        }
        bail!(msg);
    }
    println!("unpacking {names} (apt-get download)");
    let dir = std::env::temp_dir().join(format!("observer-setup-debs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let unpacked = download_and_unpack(&dir, &root, &by_hand);
    let _ = std::fs::remove_dir_all(&dir);
    unpacked?;
    if !(script.exists() && plugin.exists() && ipset_plugin.exists()) {
        bail!(
            "{}, {} or {} is missing after unpacking",
            script.display(),
            plugin.display(),
            ipset_plugin.display()
        );
    }
    println!("ok unpacked {names} in {}", root.display());
    Ok(())
}

fn download_and_unpack(dir: &std::path::Path, root: &std::path::Path, by_hand: &str) -> Result<()> {
    cmd::run(
        Command::new("apt-get")
            .args(["download", "-q"])
            .args(PERSISTENT_PACKAGES)
            .current_dir(dir),
    )
    .with_context(|| format!("downloading the packages failed; try by hand: `{by_hand}`"))?;
    std::fs::create_dir_all(root).with_context(|| format!("creating {}", root.display()))?;
    for entry in std::fs::read_dir(dir).context("listing the downloads")? {
        let deb = entry.context("listing the downloads")?.path();
        if deb.extension().is_some_and(|e| e == "deb") {
            cmd::run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(root))
                .with_context(|| format!("unpacking {}", deb.display()))?;
        }
    }
    Ok(())
}
