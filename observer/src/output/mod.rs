//! What observer prints: the event model of the output contract, filters, and two renderings
//! (JSON lines for programs, aligned colour lines for people).

pub mod filter;
pub mod human;
pub mod record;
pub mod screen;
pub mod terminal;

use std::io::{self, Write};

pub use record::{ChangeRecord, IncidentRecord, Record, Source, StatusRecord};

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    Human { colour: bool },
}

/// Writes records to a stream, one line each, flushed per line (a tail is read live).
pub struct Sink<W: Write> {
    out: W,
    format: Format,
}

impl<W: Write> Sink<W> {
    pub fn new(out: W, format: Format) -> Self {
        Sink { out, format }
    }

    pub fn write(&mut self, record: &Record) -> io::Result<()> {
        match self.format {
            Format::Json => {
                serde_json::to_writer(&mut self.out, record)?;
                self.out.write_all(b"\n")?;
            }
            Format::Human { colour } => {
                let line = human::render(record, colour);
                self.out.write_all(line.as_bytes())?;
                self.out.write_all(b"\n")?;
            }
        }
        self.out.flush()
    }
}
