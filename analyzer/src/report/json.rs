//! `--format json`: the report as one JSON document (schema `foresight-report`, version 1,
//! documented in `docs/report-schema.md`).

use std::io::Write;

use super::Report;

pub fn write(out: &mut impl Write, report: &Report) -> std::io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, report)?;
    writeln!(out)
}
