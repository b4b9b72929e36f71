//! One terminal shared by the live tail and the log. While the tail's footer is drawn, a
//! warning written to the same terminal would land on the footer's line and run past the
//! terminal's width; instead it is put above the footer, cut to the width like every other
//! line, and the footer is drawn again under it.
//!
//! Lines are fitted to the terminal here too ([`cut`], [`strip_escapes`]).
//!
//! A log event can name what a namespace observer does not trust named (a chain, a comm, a
//! decoder's complaint about a table): its text is shown escaped here ([`log_text`]) before it
//! goes to stderr or the terminal.
//!
//! The tail's screen publishes its footer here ([`Shared::footer`]) while it holds the lock;
//! the log's writer ([`LogWriter`]) takes the same lock, so the two never interleave.

use std::io::{self, IsTerminal, Write};
use std::sync::{Mutex, MutexGuard};

/// What the screen has drawn that a log line must keep.
#[derive(Debug, Default)]
pub struct Shared {
    /// The footer as drawn (with its escapes), when a screen draws one on stdout.
    pub footer: Option<String>,
    /// The terminal's width, when lines are cut to it.
    pub width: Option<usize>,
    /// Whether lines may be coloured.
    pub colour: bool,
}

static SHARED: Mutex<Shared> = Mutex::new(Shared {
    footer: None,
    width: None,
    colour: false,
});

/// The terminal's shared state, locked (a panicked holder leaves it usable).
pub fn lock() -> MutexGuard<'static, Shared> {
    SHARED.lock().unwrap_or_else(|e| e.into_inner())
}

/// The log's writer: one per log event (`tracing_subscriber`'s `MakeWriter` for a closure),
/// written out when dropped.
#[derive(Debug, Default)]
pub struct LogWriter {
    buf: Vec<u8>,
}

impl Write for LogWriter {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for LogWriter {
    fn drop(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let text = log_text(&self.buf);
        let shared = lock();
        // A footer is only drawn on a terminal; the log goes above it only when it would go
        // to that same terminal (stderr not sent elsewhere).
        match &shared.footer {
            Some(footer) if io::stderr().is_terminal() => {
                let mut out = io::stdout().lock();
                let _ = out.write_all(above_footer(&text, footer, &shared).as_bytes());
                let _ = out.flush();
            }
            _ => {
                let _ = io::stderr().lock().write_all(text.as_bytes());
            }
        }
    }
}

/// A log event's text as it may reach a terminal. tracing-subscriber (0.3.20 on) escapes ESC
/// in the values it formats, so an ESC left in the text starts its own colouring, kept; every
/// other control character (a CR or newline inside a name, a bidi override, a BEL) is shown
/// escaped ([`crate::shown`]), a byte that is not UTF-8 as `\xNN`, and the event's closing
/// newline is kept.
fn log_text(buf: &[u8]) -> String {
    let (body, end) = match buf.strip_suffix(b"\n") {
        Some(b) => (b, "\n"),
        None => (buf, ""),
    };
    let mut out = String::with_capacity(buf.len());
    for (i, part) in body.split(|&b| b == 0x1b).enumerate() {
        if i > 0 {
            out.push('\x1b');
        }
        out.push_str(&crate::shown::escape_bytes(part));
    }
    out.push_str(end);
    out
}

/// The bytes that put the log `text` on lines of its own above `footer`: the footer's line
/// cleared, each log line cut to the width (plain, or yellow with colour), the footer again.
fn above_footer(text: &str, footer: &str, shared: &Shared) -> String {
    let mut out = String::from("\r\x1b[2K");
    for line in text.lines() {
        let plain = strip_escapes(line);
        let line = match shared.width {
            Some(w) => cut(&plain, w),
            None => plain,
        };
        if shared.colour {
            out.push_str(&format!("\x1b[33m{line}\x1b[0m\n"));
        } else {
            out.push_str(&line);
            out.push('\n');
        }
    }
    out.push_str(footer);
    out
}

/// `s` in at most `width` columns, cut with `…` when longer.
pub fn cut(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        return s.to_string();
    }
    if width == 0 {
        return String::new();
    }
    let mut out: String = s.chars().take(width - 1).collect();
    out.push('…');
    out
}

/// `s` without its colour escape sequences.
pub fn strip_escapes(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut esc = false;
    for ch in s.chars() {
        if esc {
            if ch.is_ascii_alphabetic() {
                esc = false;
            }
        } else if ch == '\x1b' {
            esc = true;
        } else {
            out.push(ch);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_line_goes_above_the_footer_cut_to_the_width() {
        let shared = Shared {
            footer: Some(" open incidents: 0 ".into()),
            width: Some(20),
            colour: false,
        };
        let out = above_footer(
            "\x1b[33m WARN\x1b[0m namespace 4026532245 could not be opened\nsecond\n",
            " open incidents: 0 ",
            &shared,
        );
        assert_eq!(
            out,
            "\r\x1b[2K WARN namespace 402…\nsecond\n open incidents: 0 "
        );
    }

    #[test]
    fn a_log_event_keeps_its_colour_and_newline_and_nothing_else() {
        let raw = "\x1b[33m WARN\x1b[0m chain a\rb\nc \u{202e}x\x07 gone\n";
        assert_eq!(
            log_text(raw.as_bytes()),
            "\x1b[33m WARN\x1b[0m chain a\\x0db\\x0ac \\u202ex\\x07 gone\n"
        );
        assert_eq!(log_text(b"plain"), "plain");
        assert_eq!(log_text(b"bad \xff byte\n"), "bad \\xff byte\n");
    }

    #[test]
    fn colour_paints_the_log_line_only() {
        let shared = Shared {
            footer: Some("F".into()),
            width: None,
            colour: true,
        };
        let out = above_footer("a warning", "F", &shared);
        assert_eq!(out, "\r\x1b[2K\x1b[33ma warning\x1b[0m\nF");
    }
}
