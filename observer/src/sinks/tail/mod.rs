//! `observer tail`'s sink: the filtered stream on stdout, as JSON lines for programs or as the
//! screen a person reads (`screen`, its lines in `human`, the terminal in `terminal`). It is the
//! same whatever feeds it: the engine on this node, a record, a daemon or the fleet.
//!
//! Its bound is the reader: it keeps no queue (the screen holds one transaction's lines at most,
//! to group them), so a terminal or pipe that stops reading holds the tail, and a closed one
//! ends it.

pub mod human;
pub mod screen;
pub mod terminal;

use std::io::{self, Write};

use crate::engine::Output;
use crate::output::filter::Filter;
use crate::output::Line;
use screen::Screen;

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

    pub fn write(&mut self, record: &Line) -> io::Result<()> {
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

/// How the tail shows what passes its filter.
pub enum TailView {
    Json(Sink<io::Stdout>),
    Screen(Box<Screen<io::Stdout>>),
}

/// `observer tail`: the filtered stream on stdout, as JSON lines or as the screen a person reads.
pub struct TailOutput {
    view: TailView,
    filter: Filter,
    incidents_only: bool,
}

impl TailOutput {
    /// `incidents_only` hides the changes (`--incidents-only`); status lines always pass.
    pub fn new(view: TailView, filter: Filter, incidents_only: bool) -> Self {
        TailOutput {
            view,
            filter,
            incidents_only,
        }
    }
}

impl Output for TailOutput {
    fn emit(&mut self, record: &Line) -> io::Result<()> {
        let shown = match record {
            Line::Change(c) => !self.incidents_only && self.filter.matches(c),
            Line::Incident(i) => self.filter.matches_incident(i),
            Line::Status(_) => true,
        };
        if !shown {
            return Ok(());
        }
        match &mut self.view {
            TailView::Json(sink) => sink.write(record),
            TailView::Screen(screen) => screen.record(record),
        }
    }

    fn end_txn(&mut self) -> io::Result<()> {
        match &mut self.view {
            TailView::Json(_) => Ok(()),
            TailView::Screen(screen) => screen.end_txn(),
        }
    }
}
