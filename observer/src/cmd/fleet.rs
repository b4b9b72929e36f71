//! `observer tail --nats URL`: the fleet view. Every node's changes and incidents from the
//! JetStream stream `observer run --nats` publishes to, interleaved as they arrive, each with its
//! node (`node` in JSON; `node/netns` on the screen). The same filters as a local tail apply.
//!
//! Without `--durable`, an ordered consumer starts at `--since` (or at new messages) and is
//! gone when the tail stops. With `--durable NAME`, the consumer lives in the server: a tail
//! that stops, loses its connection or outlives a server restart goes on where it left off
//! (each message is acknowledged once printed). Lines are numbered per node and record, so a
//! message delivered again (an acknowledgement lost in a disconnect, or a row the publisher
//! deleted and published again when it repaired the stream) is not printed twice. A row the
//! publisher repaired (lost while later rows were stored) is printed when it arrives: late.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{bail, Context as _};
use async_nats::jetstream::{self, consumer};
use futures_util::StreamExt as _;

use crate::cli::TailArgs;
use crate::engine::Output;
use crate::output::{Line, StatusLine};
use crate::sinks::nats::{subject_token, HEADER_NODE, HEADER_RECORD, HEADER_SEQ};

/// Numbers remembered per node, record and subject (a repair touches the publisher's last
/// window of rows, at most 65536).
const SEEN: usize = 1 << 17;

/// A screen with transactions in progress is drawn after this long without a message.
const IDLE: Duration = Duration::from_millis(100);

pub async fn tail(args: TailArgs) -> anyhow::Result<()> {
    let url = args.nats.clone().unwrap_or_default();
    let node_glob = args
        .node
        .as_deref()
        .map(|g| {
            globset::Glob::new(g)
                .map(|g| g.compile_matcher())
                .with_context(|| format!("--node {g}: not a glob"))
        })
        .transpose()?;
    let deliver_policy = match &args.since {
        Some(s) => {
            let ns = crate::timestamp::Timestamp::parse_arg(s)
                .context("--since")?
                .unix_nanos();
            consumer::DeliverPolicy::ByStartTime {
                start_time: async_nats::datetime::from_nanos(i128::from(ns))
                    .map_err(|e| anyhow::anyhow!("--since {s}: {e}"))?,
            }
        }
        None => consumer::DeliverPolicy::New,
    };
    // Only one node, named without wildcards: the server filters.
    let filter_subject = match &args.node {
        Some(n) if !n.contains(['*', '?', '[', '{']) => {
            format!("observer.{}.>", subject_token(n))
        }
        _ => "observer.>".to_string(),
    };
    let client = args
        .nats_auth
        .auth()
        .options(&url, "observer tail".into())
        .await?
        .connection_timeout(Duration::from_secs(5))
        .connect(crate::sinks::nats::auth::url_list(&url))
        .await
        .with_context(|| {
            format!("cannot connect to the NATS server at {url} (is it running? check --nats)")
        })?;
    let js = jetstream::new(client);
    let stream = js.get_stream(&args.nats_stream).await.with_context(|| {
        format!(
            "there is no stream {} on {url}: `observer run --nats {url}` creates it (or pass the \
             stream's name with --nats-stream)",
            args.nats_stream
        )
    })?;
    let mut printer = Printer {
        output: crate::cmd::tail::tail_output(&args)?,
        node_glob,
        last: HashMap::new(),
        catch_up: None,
    };
    let following = format!(
        "following stream {} on {url}{}{}",
        args.nats_stream,
        args.node
            .as_deref()
            .map(|n| format!(", nodes {n}"))
            .unwrap_or_default(),
        args.durable
            .as_deref()
            .map(|d| format!(", durable consumer {d}"))
            .unwrap_or_default(),
    );
    let follow = async {
        match &args.durable {
            Some(name) => {
                let config = consumer::pull::Config {
                    durable_name: Some(name.clone()),
                    description: Some("observer tail --nats".into()),
                    filter_subject,
                    deliver_policy,
                    ack_policy: consumer::AckPolicy::Explicit,
                    ..Default::default()
                };
                let consumer = stream
                    .get_or_create_consumer(name, config)
                    .await
                    .with_context(|| format!("cannot create the durable consumer {name}"))?;
                printer.start(following, consumer.cached_info().num_pending)?;
                loop {
                    match consumer.messages().await {
                        Ok(messages) => printer.follow(messages, true).await?,
                        Err(e) => tracing::warn!("NATS {url}: {e}; retrying"),
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
            None => {
                let config = consumer::pull::OrderedConfig {
                    filter_subject,
                    deliver_policy,
                    ..Default::default()
                };
                let consumer = stream
                    .create_consumer(config)
                    .await
                    .context("cannot create a consumer on the stream")?;
                printer.start(following, consumer.cached_info().num_pending)?;
                let messages = consumer
                    .messages()
                    .await
                    .context("cannot read the stream")?;
                printer.follow(messages, false).await?;
                bail!("the stream ended")
            }
        }
    };
    tokio::select! {
        r = follow => r,
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}

/// While a tail prints the stream's history before its live messages: how much there was.
struct CatchUp {
    total: u64,
    started: std::time::Instant,
    said: std::time::Instant,
}

/// How often a tail still printing history says how far behind it is.
const CATCH_UP_NOTE: Duration = Duration::from_secs(5);

struct Printer {
    output: Box<dyn Output>,
    /// Printing the history the consumer started with (`--since`, or a durable consumer's
    /// backlog), until the message after which nothing is pending.
    catch_up: Option<CatchUp>,
    node_glob: Option<globset::GlobMatcher>,
    /// The numbers printed per (node, record, subject), the latest [`SEEN`] of them: a message
    /// delivered or stored again is not printed again, and a row stored late still is.
    last: HashMap<(String, String, String), std::collections::BTreeSet<u64>>,
}

impl Printer {
    /// The first line: what is followed, and how many messages of history come before the
    /// live ones.
    fn start(&mut self, following: String, pending: u64) -> anyhow::Result<()> {
        if pending == 0 {
            return self.status(following);
        }
        let now = std::time::Instant::now();
        self.catch_up = Some(CatchUp {
            total: pending,
            started: now,
            said: now,
        });
        self.status(format!(
            "{following}: {pending} messages of history to print before the live ones"
        ))
    }

    /// After a message is printed while catching up: say so when nothing is pending any more,
    /// and every [`CATCH_UP_NOTE`] how far behind the printed message is.
    fn caught_up(&mut self, m: &jetstream::Message) -> anyhow::Result<()> {
        let Some(c) = &self.catch_up else {
            return Ok(());
        };
        let Ok(info) = m.info() else {
            return Ok(());
        };
        if info.pending == 0 {
            let message = format!(
                "caught up: {} messages of history printed in {:.1} s; following live",
                c.total,
                c.started.elapsed().as_secs_f64()
            );
            self.catch_up = None;
            return self.status(message);
        }
        if c.said.elapsed() < CATCH_UP_NOTE {
            return Ok(());
        }
        let behind = (time::OffsetDateTime::now_utc() - info.published).as_seconds_f64();
        let message = format!(
            "catching up: {} of {} messages of history still to print; the last printed was \
             published {:.1} s ago",
            info.pending,
            c.total,
            behind.max(0.0)
        );
        if let Some(c) = &mut self.catch_up {
            c.said = std::time::Instant::now();
        }
        self.status(message)
    }

    fn status(&mut self, message: String) -> anyhow::Result<()> {
        let ready = Line::Status(StatusLine::ready(message));
        self.output.emit(&ready).map_err(super::output_error)?;
        Ok(())
    }

    /// Print messages until the stream ends or fails (then the caller decides).
    async fn follow<S, E>(&mut self, mut messages: S, ack: bool) -> anyhow::Result<()>
    where
        S: futures_util::Stream<Item = Result<jetstream::Message, E>> + Unpin,
        E: std::fmt::Display,
    {
        loop {
            let next = match tokio::time::timeout(IDLE, messages.next()).await {
                Ok(n) => n,
                Err(_) => {
                    self.output.end_txn().map_err(super::output_error)?;
                    continue;
                }
            };
            match next {
                None => return Ok(()),
                Some(Err(e)) => {
                    tracing::warn!("NATS: {e}; resuming");
                    if ack {
                        return Ok(());
                    }
                }
                Some(Ok(m)) => {
                    self.print(&m)?;
                    self.caught_up(&m)?;
                    if ack {
                        if let Err(e) = m.ack().await {
                            tracing::debug!("acknowledging a message: {e}");
                        }
                    }
                }
            }
        }
    }

    fn print(&mut self, m: &jetstream::Message) -> anyhow::Result<()> {
        let header = |name: &str| {
            m.headers
                .as_ref()
                .and_then(|h| h.get(name))
                .map(|v| v.as_str().to_string())
        };
        let node = header(HEADER_NODE).unwrap_or_else(|| {
            // Not published by observer run: name it by the subject's node token.
            m.subject.split('.').nth(1).unwrap_or("?").to_string()
        });
        if self.node_glob.as_ref().is_some_and(|g| !g.is_match(&node)) {
            return Ok(());
        }
        if let Some(n) = header(HEADER_SEQ).and_then(|v| v.parse::<u64>().ok()) {
            let key = (
                node.clone(),
                header(HEADER_RECORD).unwrap_or_default(),
                m.subject.to_string(),
            );
            let seen = self.last.entry(key).or_default();
            if !seen.insert(n) {
                return Ok(());
            }
            if seen.len() > SEEN {
                seen.pop_first();
            }
        }
        let mut record: Line = match serde_json::from_slice(&m.payload) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(
                    "a message on {} is not an observer line ({e}): skipped",
                    m.subject
                );
                return Ok(());
            }
        };
        match &mut record {
            Line::Change(c) => c.node = Some(node),
            Line::Incident(i) => i.node = Some(node),
            Line::Status(_) => {}
        }
        self.output.emit(&record).map_err(super::output_error)?;
        Ok(())
    }
}
