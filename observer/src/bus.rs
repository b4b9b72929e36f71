//! The system bus, watched for who asks a D-Bus firewall manager (firewalld) for a change.
//!
//! firewalld makes its changes itself (through libnftables, or the `iptables-restore` it runs),
//! so the kernel names firewalld as the writer of every one of them. The person or job behind a
//! change called firewalld over D-Bus (`firewall-cmd --reload`, `--direct --add-rule`). A
//! monitor connection (`BecomeMonitor`) on the system bus receives a copy of each method call to
//! firewalld and of each of its replies; a second, ordinary connection asks the bus for the
//! caller's pid (`GetConnectionUnixProcessID`) while the caller waits for its reply, and `/proc`
//! names it, its ancestry, unit and pod, as for any writer. The engine's core
//! ([`crate::engine`]'s `requests`) matches firewalld's changes to the calls they served.
//!
//! Nothing is sent to firewalld and nothing on the bus is changed: the monitor only reads. No
//! bus (a node without D-Bus), or a bus that refuses to be monitored (not root), leaves the
//! changes as they are, firewalld's, with a log line; `observer doctor` says which.

use std::collections::VecDeque;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::mpsc;
use zbus::message::Type;
use zbus::{Connection, MessageStream};

use crate::attribution::Requester;
use crate::engine::requests::{Call, Reply};
use crate::timestamp::Timestamp;

/// firewalld's bus name; its interfaces are this and names under it (`.direct`, `.zone`).
pub const FIREWALLD: &str = "org.fedoraproject.FirewallD1";
/// Where the system bus listens when `DBUS_SYSTEM_BUS_ADDRESS` does not say.
pub const DEFAULT_ADDRESS: &str = "unix:path=/run/dbus/system_bus_socket";

const BUS: &str = "org.freedesktop.DBus";
const BUS_PATH: &str = "/org/freedesktop/DBus";

/// How long after a failure the bus is tried again.
const RETRY: Duration = Duration::from_secs(15);
/// The calls whose replies are waited for at most (older ones are forgotten).
const PENDING: usize = 256;

/// What the watcher tells the engine.
#[derive(Debug)]
pub enum BusMsg {
    Call(Box<Call>),
    Reply(Reply),
}

/// The system bus to watch: `flag` (`--system-bus`), else `DBUS_SYSTEM_BUS_ADDRESS`, else
/// [`DEFAULT_ADDRESS`]; None when `flag` is `off`.
pub fn address(flag: Option<&str>) -> Option<String> {
    match flag {
        Some("off") => None,
        Some(a) => Some(a.to_string()),
        None => Some(
            std::env::var("DBUS_SYSTEM_BUS_ADDRESS")
                .ok()
                .filter(|a| !a.is_empty())
                .unwrap_or_else(|| DEFAULT_ADDRESS.to_string()),
        ),
    }
}

/// Whether a method call to firewalld asks for a change: any method of its interfaces but the
/// ones that only read (`get…`, `query…`, `list…`, `is…`, `check…`), and none of the bus's
/// standard interfaces (introspection, properties).
pub fn is_request(interface: &str, member: &str) -> bool {
    const READS: &[&str] = &["get", "query", "list", "is", "check", "authorize"];
    let ours = interface == FIREWALLD
        || interface
            .strip_prefix(FIREWALLD)
            .is_some_and(|rest| rest.starts_with('.'));
    ours && !READS.iter().any(|r| {
        member
            .strip_prefix(r)
            .is_some_and(|rest| rest.chars().next().is_none_or(|c| c.is_ascii_uppercase()))
    })
}

/// Why the bus could not be watched, in words that name the fix.
#[derive(Debug, thiserror::Error)]
pub enum BusError {
    #[error(
        "no system bus at {0}: firewalld's callers cannot be named (where firewalld runs, \
         mount the host's /run/dbus; --system-bus off says there is none)"
    )]
    Absent(String),
    #[error(
        "the system bus at {address} refused to be monitored ({cause}): firewalld's callers \
         cannot be named (observer must run as root, the user the bus lets monitor)"
    )]
    Refused { address: String, cause: String },
    #[error("the system bus at {address}: {cause}")]
    Other { address: String, cause: String },
}

/// Connect to `address` and make sure it can be monitored; the connection is closed again.
/// What `observer doctor` checks.
pub async fn check(address: &str) -> Result<(), BusError> {
    let c = connect(address).await?;
    become_monitor(&c, address, &rules(None)).await
}

/// Watch the bus at `address` until the engine goes away, telling it of firewalld's calls
/// and replies. Trouble is logged once per kind, and the bus tried again after a while.
pub async fn watch(address: String, tx: mpsc::Sender<BusMsg>) {
    let mut last_said: Option<String> = None;
    while !tx.is_closed() {
        match watch_once(&address, &tx).await {
            Ok(()) => {
                // firewalld's owner changed (it started or restarted): watch again at once,
                // with its new name.
                last_said = None;
                continue;
            }
            Err(e) => {
                let text = e.to_string();
                if last_said.as_deref() != Some(text.as_str()) {
                    match e {
                        BusError::Absent(_) => tracing::info!("{text}"),
                        _ => tracing::warn!("{text}"),
                    }
                    last_said = Some(text);
                }
            }
        }
        tokio::time::sleep(RETRY).await;
    }
}

async fn connect(address: &str) -> Result<Connection, BusError> {
    let path = address.strip_prefix("unix:path=");
    if let Some(p) = path.map(|p| p.split(',').next().unwrap_or(p)) {
        if !std::path::Path::new(p).exists() {
            return Err(BusError::Absent(address.to_string()));
        }
    }
    let other = |cause: zbus::Error| BusError::Other {
        address: address.to_string(),
        cause: cause.to_string(),
    };
    zbus::connection::Builder::address(address)
        .build()
        .await
        .map_err(other)
}

/// The monitor's match rules: method calls to firewalld (by its well-known name and, once it
/// runs, its unique one: a client may address either), its replies and errors, and the change
/// of its owner.
fn rules(owner: Option<&str>) -> Vec<String> {
    let mut r = vec![
        format!("type='method_call',destination='{FIREWALLD}'"),
        format!("type='method_return',sender='{FIREWALLD}'"),
        format!("type='error',sender='{FIREWALLD}'"),
        format!(
            "type='signal',sender='{BUS}',interface='{BUS}',member='NameOwnerChanged',\
             arg0='{FIREWALLD}'"
        ),
    ];
    if let Some(o) = owner {
        r.push(format!("type='method_call',destination='{o}'"));
    }
    r
}

async fn become_monitor(c: &Connection, address: &str, rules: &[String]) -> Result<(), BusError> {
    let rules: Vec<&str> = rules.iter().map(String::as_str).collect();
    c.call_method(
        Some(BUS),
        BUS_PATH,
        Some("org.freedesktop.DBus.Monitoring"),
        "BecomeMonitor",
        &(rules, 0u32),
    )
    .await
    .map(|_| ())
    .map_err(|e| BusError::Refused {
        address: address.to_string(),
        cause: e.to_string(),
    })
}

/// A question to the bus on the ordinary connection about `name`.
async fn ask(c: &Connection, method: &str, name: &str) -> Option<zbus::Message> {
    c.call_method(Some(BUS), BUS_PATH, Some(BUS), method, &(name,))
        .await
        .ok()
}

/// The pid of the connection that owns `name` (a unique or a well-known name).
async fn pid_of(c: &Connection, name: &str) -> Option<u32> {
    let reply = ask(c, "GetConnectionUnixProcessID", name).await?;
    reply.body().deserialize::<u32>().ok()
}

/// The unique name that owns `name`, when one does.
async fn owner_of(c: &Connection, name: &str) -> Option<String> {
    let reply = ask(c, "GetNameOwner", name).await?;
    reply.body().deserialize::<String>().ok()
}

/// One monitor connection, until firewalld's owner changes (Ok) or the bus goes away (Err).
async fn watch_once(address: &str, tx: &mpsc::Sender<BusMsg>) -> Result<(), BusError> {
    let query = connect(address).await?;
    let owner = owner_of(&query, FIREWALLD).await;
    let manager = match &owner {
        Some(o) => pid_of(&query, o).await,
        None => None,
    };
    let monitor = connect(address).await?;
    become_monitor(&monitor, address, &rules(owner.as_deref())).await?;
    tracing::debug!(
        "watching the system bus at {address} for firewalld's callers (firewalld: {})",
        manager.map_or_else(|| "not running".to_string(), |p| format!("pid {p}"))
    );
    // The calls passed on, whose replies end their windows: (caller, serial).
    let mut pending: VecDeque<(String, u32)> = VecDeque::new();
    let mut stream = MessageStream::from(monitor);
    while let Some(msg) = stream.next().await {
        let msg = msg.map_err(|e| BusError::Other {
            address: address.to_string(),
            cause: e.to_string(),
        })?;
        let time = Timestamp::now();
        let h = msg.header();
        match msg.message_type() {
            Type::Signal => {
                if h.member().is_some_and(|m| m.as_str() == "NameOwnerChanged") {
                    return Ok(());
                }
            }
            Type::MethodCall => {
                let (Some(manager), Some(sender), Some(iface), Some(member)) =
                    (manager, h.sender(), h.interface(), h.member())
                else {
                    continue;
                };
                // A call that wants no reply would leave its window open with nothing to end
                // it, and lend its caller to firewalld's own changes meanwhile: not matched.
                let no_reply = h
                    .primary()
                    .flags()
                    .contains(zbus::message::Flags::NO_REPLY_EXPECTED);
                if no_reply || !is_request(iface.as_str(), member.as_str()) {
                    continue;
                }
                let sender = sender.to_string();
                let serial = h.primary().serial_num().get();
                let method = format!("{iface}.{member}");
                let Some(pid) = pid_of(&query, &sender).await else {
                    continue;
                };
                let Some(requester) = Requester::of_caller(pid, method) else {
                    continue;
                };
                if pending.len() >= PENDING {
                    pending.pop_front();
                }
                pending.push_back((sender.clone(), serial));
                let call = Call {
                    manager,
                    sender,
                    serial,
                    time,
                    requester,
                };
                if tx.try_send(BusMsg::Call(Box::new(call))).is_err() && tx.is_closed() {
                    return Ok(());
                }
            }
            Type::MethodReturn | Type::Error => {
                let (Some(to), Some(serial)) = (h.destination(), h.reply_serial()) else {
                    continue;
                };
                let key = (to.to_string(), serial.get());
                let Some(at) = pending.iter().position(|p| *p == key) else {
                    continue;
                };
                pending.remove(at);
                let reply = Reply {
                    sender: key.0,
                    serial: key.1,
                    time,
                };
                if tx.try_send(BusMsg::Reply(reply)).is_err() && tx.is_closed() {
                    return Ok(());
                }
            }
        }
    }
    Err(BusError::Other {
        address: address.to_string(),
        cause: "the connection closed".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_methods_that_change_something_are_requests() {
        assert!(is_request(FIREWALLD, "reload"));
        assert!(is_request(FIREWALLD, "completeReload"));
        assert!(is_request(FIREWALLD, "runtimeToPermanent"));
        assert!(is_request(&format!("{FIREWALLD}.direct"), "addRule"));
        assert!(is_request(&format!("{FIREWALLD}.zone"), "addService"));
        assert!(is_request(
            &format!("{FIREWALLD}.policy"),
            "setPolicySettings"
        ));
        // Reads are not.
        assert!(!is_request(FIREWALLD, "getDefaultZone"));
        assert!(!is_request(FIREWALLD, "listServices"));
        assert!(!is_request(&format!("{FIREWALLD}.zone"), "queryService"));
        assert!(!is_request(FIREWALLD, "checkPermanentConfig"));
        // ...but a method that merely starts like one is a request.
        assert!(is_request(FIREWALLD, "issueSomething"));
        // Nor the bus's standard interfaces, nor another service's.
        assert!(!is_request("org.freedesktop.DBus.Properties", "Set"));
        assert!(!is_request("org.fedoraproject.FirewallD10", "reload"));
    }

    #[test]
    fn the_address_is_the_flag_the_environment_or_the_default() {
        assert_eq!(address(Some("off")), None);
        assert_eq!(
            address(Some("unix:path=/tmp/b")).as_deref(),
            Some("unix:path=/tmp/b")
        );
        // (The environment is the process's: only the flag's cases are checked here.)
    }
}
