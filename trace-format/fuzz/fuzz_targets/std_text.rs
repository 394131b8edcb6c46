//! Any bytes as RAPID STD text: the import into a foresight trace (`stdtrace::import_from`)
//! and the happens-before race engine that reads STD directly (`stdtrace::hb::hb_races`).
//! No input may panic; an error names a line of the input; a trace the import wrote is one
//! the trace reader takes without a problem and in a valid order.
#![no_main]

use foresight_stdtrace::{self as stdtrace, Failure};
use foresight_trace::{ordering, Trace};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Line numbers count every line end; one more for a last line without one.
    let lines = data.iter().filter(|&&b| b == b'\n').count() as u64 + 1;
    let check_line = |e: &Failure| {
        if let Failure::Input(e) = e {
            assert!(
                e.line >= 1 && e.line <= lines,
                "error names line {} of {lines}: {e}",
                e.line
            );
        }
    };
    let mut importer =
        stdtrace::Importer::new(Vec::new(), "fuzz.std").expect("writing to memory cannot fail");
    match stdtrace::import_from(data, &mut importer) {
        Ok(()) => match importer.finish() {
            Ok((bytes, _summary)) => {
                let trace =
                    Trace::from_bytes("fuzz.trace", bytes).expect("an imported trace is a trace");
                assert!(
                    trace.problems.is_empty(),
                    "import wrote a bad trace: {:?}",
                    trace.problems
                );
                let order = ordering::check(&trace);
                assert!(
                    order.is_empty(),
                    "import wrote an unordered trace: {order:?}"
                );
            }
            Err(e) => panic!("writing to memory failed: {e}"),
        },
        Err(e) => check_line(&e),
    }
    if let Err(e) = stdtrace::hb::hb_races(data) {
        check_line(&e);
    }
});
