//! observer's NATS stream as the tests read it back.

use std::time::Duration;

use serde_json::Value;

/// A message of observer's stream: its subject, headers and JSON payload.
pub type StreamMessage = (String, std::collections::HashMap<String, String>, Value);

/// Every message on `observer.>` in the stream `name`, in stream order, read with an ordered
/// consumer of its own.
pub async fn stream_messages(
    js: &async_nats::jetstream::Context,
    name: &str,
) -> Vec<StreamMessage> {
    use futures_util::StreamExt as _;
    let mut stream = js.get_stream(name).await.expect("the stream");
    let total = stream.info().await.expect("stream info").state.messages;
    let consumer = stream
        .create_consumer(async_nats::jetstream::consumer::pull::OrderedConfig {
            filter_subject: "observer.>".into(),
            deliver_policy: async_nats::jetstream::consumer::DeliverPolicy::All,
            ..Default::default()
        })
        .await
        .expect("consumer");
    let mut messages = consumer.messages().await.expect("messages");
    let mut out = Vec::new();
    while (out.len() as u64) < total {
        let m = tokio::time::timeout(Duration::from_secs(10), messages.next())
            .await
            .expect("the stream's messages within 10 s")
            .expect("a message")
            .expect("no error");
        let headers = m
            .headers
            .iter()
            .flat_map(|h| h.iter())
            .map(|(k, v)| {
                let v = v.first().map(|v| v.as_str().to_string());
                (k.to_string(), v.unwrap_or_default())
            })
            .collect();
        let payload: Value = serde_json::from_slice(&m.payload).expect("JSON payload");
        out.push((m.subject.to_string(), headers, payload));
    }
    out
}
