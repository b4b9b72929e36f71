//! The container image `cargo xtask image` builds, run with podman the way deploy/observer.yaml
//! runs it: the manifest's capabilities (all others dropped), its host mounts, the host's PID
//! and network namespaces, a read-only root filesystem. `observer doctor` must pass inside it,
//! and `observer tail` inside it must report a change made in a namespace this test creates,
//! naming the writer. Needs root and podman; the image must be the one of this build (its label
//! holds the binary's SHA-256), which `cargo xtask test` makes before running the tests
//! (`cargo xtask test -- -p observer-tests --test image` for this test alone).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;
use test_support::{observer_bin, skip_unless, Netns, Writer};

const IMAGE: &str = "localhost/observer:latest";
const BINARY_LABEL: &str = "io.observer.binary-sha256";

/// What `podman run` needs to run the image as the DaemonSet runs it, read from the manifest.
struct PodSpec {
    caps: Vec<String>,
    /// `-v` arguments for the manifest's hostPath volumes that exist on this machine.
    mounts: Vec<String>,
    read_only: bool,
    host_pid: bool,
    host_network: bool,
}

fn manifest_pod_spec(record_dir: &Path) -> PodSpec {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/observer.yaml");
    let text = std::fs::read_to_string(&path).expect("read deploy/observer.yaml");
    let ds = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|doc| {
            <serde_yaml_ng::Value as serde::Deserialize>::deserialize(doc).expect("YAML document")
        })
        .find(|v| v["kind"] == "DaemonSet")
        .expect("a DaemonSet in deploy/observer.yaml");
    let pod = &ds["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let sc = &container["securityContext"];
    assert_eq!(
        sc["capabilities"]["drop"][0], "ALL",
        "the manifest drops every capability"
    );
    let caps = sc["capabilities"]["add"]
        .as_sequence()
        .expect("capabilities.add")
        .iter()
        .map(|c| c.as_str().expect("capability name").to_string())
        .collect();
    let mut mounts = Vec::new();
    for m in container["volumeMounts"]
        .as_sequence()
        .expect("volumeMounts")
    {
        let name = m["name"].as_str().expect("mount name");
        let target = m["mountPath"].as_str().expect("mountPath");
        let volume = pod["volumes"]
            .as_sequence()
            .expect("volumes")
            .iter()
            .find(|v| v["name"].as_str() == Some(name))
            .expect("the mount's volume");
        let Some(host) = volume["hostPath"]["path"].as_str() else {
            continue; // secrets and emptyDirs: not needed by doctor and tail
        };
        let host = if target == "/var/lib/observer" {
            // The record directory: the test's own, not the machine's.
            record_dir.to_str().expect("utf-8").to_string()
        } else if Path::new(host).exists() {
            host.to_string()
        } else {
            continue; // e.g. /var/log/pods on a machine that is not a Kubernetes node
        };
        let mut opts = Vec::new();
        if m["readOnly"].as_bool() == Some(true) {
            opts.push("ro");
        }
        if m["mountPropagation"].as_str() == Some("HostToContainer") {
            opts.push("rslave");
        }
        let opts = if opts.is_empty() {
            String::new()
        } else {
            format!(":{}", opts.join(","))
        };
        mounts.push(format!("{host}:{target}{opts}"));
    }
    PodSpec {
        caps,
        mounts,
        read_only: sc["readOnlyRootFilesystem"].as_bool() == Some(true),
        host_pid: pod["hostPID"].as_bool() == Some(true),
        host_network: pod["hostNetwork"].as_bool() == Some(true),
    }
}

/// `podman run` with the manifest's security settings and mounts; ARGS go to observer.
fn podman_run(spec: &PodSpec, name: &str, args: &[&str]) -> Command {
    let mut c = Command::new("podman");
    c.args(["run", "--rm", "--name", name, "--pull=never"]);
    // runc refuses podman's default rlimits for root where the runtime may not raise them.
    c.args([
        "--ulimit",
        "nofile=16384:16384",
        "--ulimit",
        "nproc=4096:4096",
    ]);
    c.args(["--cap-drop", "all"]);
    for cap in &spec.caps {
        c.args(["--cap-add", cap]);
    }
    c.args(["--security-opt", "apparmor=unconfined"]);
    if spec.read_only {
        c.arg("--read-only");
    }
    if spec.host_pid {
        c.arg("--pid=host");
    }
    if spec.host_network {
        c.arg("--network=host");
    }
    for m in &spec.mounts {
        c.args(["-v", m]);
    }
    c.arg(IMAGE).args(args);
    c
}

/// The image's binary label, or why the image cannot be used.
fn image_is_this_build() -> Result<(), String> {
    let out = Command::new("podman")
        .args([
            "image",
            "inspect",
            "--format",
            &format!("{{{{index .Labels \"{BINARY_LABEL}\"}}}}"),
            IMAGE,
        ])
        .output()
        .map_err(|e| format!("podman: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "there is no image {IMAGE} (`cargo xtask test -- -p observer-tests --test image` \
             builds it, then runs this test): {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let label = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let sum = Command::new("sha256sum")
        .arg(observer_bin())
        .output()
        .map_err(|e| format!("sha256sum: {e}"))?;
    let sum = String::from_utf8_lossy(&sum.stdout);
    let sum = sum.split_whitespace().next().unwrap_or_default();
    if label != sum {
        return Err(format!(
            "{IMAGE} was built from another binary (label {label:?}, this test's {sum}); \
             `cargo xtask test -- -p observer-tests --test image` builds the image of the binary \
             the tests run, then runs this test"
        ));
    }
    Ok(())
}

/// A container removed when dropped (also when the test fails).
struct Container {
    name: String,
    child: Child,
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = Command::new("podman")
            .args(["rm", "--force", "--time", "2", &self.name])
            .output();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_image_runs_doctor_and_reports_a_change_made_in_a_namespace() {
    skip_unless!("podman", "ip", "nft", "sha256sum");
    if let Err(why) = image_is_this_build() {
        test_support::skip(why);
        return;
    }
    let record = tempfile::tempdir().expect("tempdir");
    let spec = manifest_pod_spec(record.path());
    assert!(
        spec.caps.iter().any(|c| c == "SYS_ADMIN") && spec.caps.len() <= 6,
        "unexpected capabilities in the manifest: {:?}",
        spec.caps
    );
    let name = format!("observer-image-test-{}", std::process::id());

    // doctor: every check passes under the manifest's capabilities.
    let out = podman_run(&spec, &format!("{name}-doctor"), &["doctor"])
        .output()
        .expect("podman run doctor");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "observer doctor failed in the container:\n{text}"
    );
    assert!(
        text.contains("ok   bpf") && text.contains("nothing is lost"),
        "doctor in the container did not attach its programs:\n{text}"
    );

    // tail: a change in a namespace created after it started, named with its writer.
    let child = podman_run(&spec, &name, &["tail", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("podman run tail");
    let (_container, rx, ready) = started(name, child);
    assert!(
        ready["hooks"]
            .as_str()
            .is_some_and(|h| !h.starts_with("x_tables=none")),
        "no x_tables hook in the container: {ready}"
    );

    let ns = Netns::new("image");
    let writer = Writer::new("imgwriter");
    let mut seen = Vec::new();
    let mut wait_for_table = |table: &str| loop {
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(v) if v["kind"] == "change" && v["table"] == table => break v,
            Ok(v) => seen.push(v),
            Err(_) => panic!(
                "the container reported no change of table {table} within 20 s; saw:\n{}",
                seen.iter()
                    .map(Value::to_string)
                    .collect::<Vec<_>>()
                    .join("\n")
            ),
        }
    };
    // A change made the instant a namespace appears may predate observer's subscription to it
    // (then it is reported `replayed`, without its writer): the first change waits for that.
    ns.write(&writer, &["nft", "add", "table", "inet", "first"]);
    wait_for_table("first");
    ns.write(&writer, &["nft", "add", "table", "inet", "from_outside"]);
    let change = wait_for_table("from_outside");
    assert_eq!(change["op"], "table_create", "{change}");
    assert_eq!(change["netns"].as_u64(), Some(ns.ino()), "{change}");
    assert_eq!(change["process"]["comm"], "nft", "{change}");
    assert_eq!(change["process"]["parent_comm"], "imgwriter", "{change}");
}

/// The container's JSON lines, once its ready line has come.
fn started(name: String, mut child: Child) -> (Container, mpsc::Receiver<Value>, Value) {
    let stdout = child.stdout.take().expect("stdout");
    let container = Container { name, child };
    let (tx, rx) = mpsc::channel::<Value>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let Ok(v) = serde_json::from_str(&line) else {
                panic!("not JSON from the container: {line}");
            };
            if tx.send(v).is_err() {
                break;
            }
        }
    });
    let ready = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("no ready line from observer in the container within 60 s");
    assert_eq!(ready["state"], "ready", "{ready}");
    (container, rx, ready)
}

/// `--restore` from the image, which holds no iptables: observer runs the node's own
/// iptables-legacy-restore in the node's mount namespace (CAP_SYS_CHROOT, from the manifest),
/// and kubelet's chain is back.
#[test]
fn the_image_restores_through_the_nodes_own_tools() {
    skip_unless!(
        "podman",
        "ip",
        "iptables-legacy",
        "iptables-legacy-save",
        "sha256sum"
    );
    if let Err(why) = image_is_this_build() {
        test_support::skip(why);
        return;
    }
    let record = tempfile::tempdir().expect("tempdir");
    let spec = manifest_pod_spec(record.path());
    let name = format!("observer-image-restore-{}", std::process::id());
    let child = podman_run(&spec, &name, &["tail", "--json", "--restore", "kubelet"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("podman run tail");
    let (_container, rx, _ready) = started(name, child);
    let ns = Netns::new("image-restore");
    let inode = ns.ino();
    let mut seen = Vec::new();
    let mut wait = |what: &str, pred: &dyn Fn(&Value) -> bool| loop {
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(v) if v["netns"].as_u64() == Some(inode) && pred(&v) => break v,
            Ok(v) => seen.push(v),
            Err(_) => panic!(
                "no {what} from the container within 20 s; saw:\n{}",
                seen.iter()
                    .map(Value::to_string)
                    .collect::<Vec<_>>()
                    .join("\n")
            ),
        }
    };
    let kubelet = Writer::new("kubelet");
    ns.write(&kubelet, &["iptables-legacy", "-N", "KUBE-FIREWALL"]);
    wait("the first change", &|v| v["kind"] == "change");
    ns.write(
        &kubelet,
        &[
            "iptables-legacy",
            "-A",
            "KUBE-FIREWALL",
            "-m",
            "mark",
            "--mark",
            "0x8000/0x8000",
            "-j",
            "DROP",
        ],
    );
    ns.write(
        &kubelet,
        &["iptables-legacy", "-I", "INPUT", "-j", "KUBE-FIREWALL"],
    );
    wait("kubelet's jump", &|v| {
        v["op"] == "rule_add" && v["chain"] == "INPUT"
    });
    let save = || {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                ns.name(),
                "iptables-legacy-save",
                "-t",
                "filter",
            ])
            .output()
            .expect("save");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.contains("KUBE-FIREWALL"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let before = save();
    let wiper = Writer::new("iptables-reset");
    ns.write(&wiper, &["iptables-legacy", "-F"]);
    ns.write(&wiper, &["iptables-legacy", "-X"]);
    let line = wait("the restore", &|v| {
        v["kind"] == "incident" && v["restore"]["outcome"].is_string()
    });
    assert_eq!(line["restore"]["outcome"], "restored", "{line}");
    assert_eq!(save(), before);
}
