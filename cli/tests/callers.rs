//! Two frames per site, through the CLI as a user runs it: a site recorded with the default
//! one frame also names the caller of its function (the caller of its first occurrence, said
//! so), in text, JSON and SARIF; `--stack-depth 2` names every caller exactly; and a C++
//! lambda is named by the function it is written in, with its line.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use foresight_fixtures::harness::{self, compiler_available, tools_required, Compiler};

fn fixture(dir: &str, name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../fixtures/{dir}/{name}"))
}

fn foresight(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_foresight"))
        .env("FORESIGHT_RUNTIME", harness::runtime())
        .args(args)
        .output()
        .expect("run foresight")
}

fn record(program: &Path, trace: &Path, extra: &[&str]) {
    let mut args = vec!["record", "-o", trace.to_str().unwrap()];
    args.extend(extra);
    args.extend(["--", program.to_str().unwrap()]);
    let out = foresight(&args);
    assert!(
        out.status.success(),
        "record {}: {}",
        program.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn analyze(trace: &Path, format: &str) -> String {
    let out = foresight(&["analyze", "--format", format, trace.to_str().unwrap()]);
    assert!(
        out.status.code() == Some(0) || out.status.code() == Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Every `called_from` of the findings' locations, as `role function:line first_call_only`,
/// by thread name.
fn callers(report: &serde_json::Value) -> Vec<String> {
    let mut out: Vec<String> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|f| f["locations"].as_array().unwrap().clone())
        .filter(|l| !l["called_from"].is_null())
        .map(|l| {
            let c = &l["called_from"];
            format!(
                "{} {} at {}:{} from {}:{}{}",
                l["thread"].as_str().unwrap_or("?"),
                l["role"].as_str().unwrap(),
                l["function"].as_str().unwrap_or("?"),
                l["line"],
                c["function"].as_str().unwrap_or("?"),
                c["line"],
                if c["first_call_only"] == true {
                    " (first)"
                } else {
                    ""
                }
            )
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

#[test]
fn a_site_names_the_caller_of_its_function() {
    // `transfer` takes both locks; `pay` calls it first, `refund` 100 ms later.
    let program = harness::compile_source(&fixture("deadlock", "transfer_unordered.c"));
    let dir = harness::fresh_dir("callers");
    let trace = dir.join("one-frame.trace");
    record(&program, &trace, &[]);

    let text = analyze(&trace, "text");
    assert!(
        text.contains(
            "    holds accounts[0].lock (write), acquired at transfer (transfer_unordered.c:15)"
        ) && text.contains("      first called from pay (transfer_unordered.c:25)"),
        "{text}"
    );
    let json: serde_json::Value = serde_json::from_str(&analyze(&trace, "json")).unwrap();
    let found = callers(&json);
    // One frame per site: a site is its return address, whoever called its function, so the
    // one caller known is the first one's (`pay`'s), for `refund`'s calls too.
    assert!(!found.is_empty(), "{json:#}");
    assert!(
        found.iter().all(|c| c.ends_with("from pay:25 (first)")),
        "{found:#?}"
    );
    let site = &json["findings"][0]["edges"][0]["site"];
    assert_eq!(site["called_from"]["function"], "pay", "{site:#}");
    assert_eq!(site["called_from"]["first_call_only"], true, "{site:#}");

    let sarif: serde_json::Value = serde_json::from_str(&analyze(&trace, "sarif")).unwrap();
    let stacks = &sarif["runs"][0]["results"][0]["stacks"];
    let frames = &stacks[0]["frames"];
    assert_eq!(frames.as_array().map(Vec::len), Some(2), "{stacks:#}");
    assert_eq!(
        frames[1]["location"]["logicalLocations"][0]["name"], "pay",
        "{stacks:#}"
    );
    assert!(
        stacks[0]["message"]["text"]
            .as_str()
            .unwrap()
            .contains("first called from pay (transfer_unordered.c:25)"),
        "{stacks:#}"
    );

    // Two frames per site: each call's own caller, exactly.
    let trace = dir.join("two-frames.trace");
    record(&program, &trace, &["--stack-depth", "2"]);
    let json: serde_json::Value = serde_json::from_str(&analyze(&trace, "json")).unwrap();
    let found = callers(&json);
    assert!(
        found.iter().any(|c| c.ends_with("from pay:25"))
            && found.iter().any(|c| c.ends_with("from refund:32")),
        "{found:#?}"
    );
    assert!(!found.iter().any(|c| c.ends_with("(first)")), "{found:#?}");
}

#[test]
fn a_lambda_is_named_by_its_enclosing_function_and_line() {
    // The thread's lambda takes the lock at line 13 (`std_thread.cc`).
    let source = fixture("deadlock", "std_thread.cc");
    let mut ran = false;
    for compiler in [Compiler::Gcc, Compiler::Clang] {
        if !compiler_available(compiler) {
            assert!(
                !tools_required(),
                "{} is not installed",
                compiler.driver(harness::Lang::Cxx)
            );
            eprintln!(
                "SKIPPED with {}: not installed",
                compiler.driver(harness::Lang::Cxx)
            );
            continue;
        }
        for opt in ["0", "2"] {
            let program = harness::compile_optimised(&source, compiler, opt);
            let dir = harness::fresh_dir(&format!("lambda-{}-O{opt}", compiler.name()));
            let trace = dir.join("run.trace");
            record(&program, &trace, &[]);
            let text = analyze(&trace, "text");
            // Out of line, the lambda's enclosing function is named; inlined into
            // `std::thread`'s invoker, GCC's debug information does not say it, and the
            // lambda is named by its line.
            let exact = text.contains("requests m at lambda in main (std_thread.cc:13)");
            let by_line = text.contains("requests m at lambda (std_thread.cc:13)");
            assert!(
                exact || (by_line && opt == "2" && compiler == Compiler::Gcc),
                "{} -O{opt}:\n{text}",
                compiler.name()
            );
            assert!(
                !text.contains("operator()") && !text.contains("{lambda"),
                "{} -O{opt}:\n{text}",
                compiler.name()
            );
            ran = true;
        }
    }
    assert!(ran || !tools_required());
}
