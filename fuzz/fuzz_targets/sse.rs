//! The `/events` Server-Sent Events stream as `observer tail --remote` reads it:
//! `remote::SseParser::feed` on the whole input and on the same bytes in small chunks (the
//! first byte picks their size), which must give the same events; each event's data is then
//! read as the record it carries (`output::Line`, what the remote tail draws).
#![no_main]

use libfuzzer_sys::fuzz_target;
use observer::cmd::remote::SseParser;

fuzz_target!(|data: &[u8]| {
    let Some((first, stream)) = data.split_first() else {
        return;
    };
    let whole = SseParser::default().feed(stream);
    let mut p = SseParser::default();
    let mut chunked = Vec::new();
    for chunk in stream.chunks(usize::from(first % 16) + 1) {
        chunked.extend(p.feed(chunk));
    }
    assert_eq!(whole, chunked, "events depend on how the stream was cut");
    for e in &whole {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&e.data) {
            if let Ok(r) = serde_json::from_value::<observer::output::Line>(v) {
                std::hint::black_box(serde_json::to_string(&r).ok());
            }
        }
    }
});
