//! Brendan Gregg's collapsed ("folded") stacks, as `flamegraph.pl`, inferno and speedscope read them.
//!
//! One line per stack: `thread 1234 (MainThread);outermost;...;innermost 42`. A Python frame renders as
//! `function (file:line)` ([`Frame`]'s `Display`), a pseudo-frame as `<native>` or `<GC>`. When the window
//! holds samples of more than one process, each line starts with `process PID;`, so threads of different
//! processes stay apart. `;` separates frames and a line break ends the line, so either inside a name
//! becomes `_`. Lines are sorted, and stacks that render the same are merged.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{self, Write};

use crate::aggregate::{ProfileWindow, StackKey};
use crate::symbolize::Frame;

/// The collapsed lines of `window`, sorted, each `stack count` without a line break.
pub fn lines(window: &ProfileWindow) -> Vec<String> {
    let multi_process = window.pids().len() > 1;
    let mut merged: BTreeMap<String, u64> = BTreeMap::new();
    for (key, count) in window.stacks() {
        let stack = render_stack(key, multi_process);
        let total = merged.entry(stack).or_insert(0);
        *total = total.saturating_add(count);
    }
    merged
        .into_iter()
        .map(|(stack, count)| format!("{stack} {count}"))
        .collect()
}

/// Writes `window` as collapsed stacks, one line each.
pub fn write(window: &ProfileWindow, out: &mut impl Write) -> io::Result<()> {
    for line in lines(window) {
        writeln!(out, "{line}")?;
    }
    Ok(())
}

/// `[process PID;]thread TID[ (NAME)];outermost;...;innermost`.
fn render_stack(key: &StackKey, multi_process: bool) -> String {
    let mut stack = String::new();
    if multi_process {
        let _ = write!(stack, "process {};", key.thread.pid);
    }
    let _ = write!(stack, "thread {}", key.thread.tid);
    if let Some(name) = &key.thread.thread_name {
        stack.push_str(" (");
        push_sanitized(&mut stack, name);
        stack.push(')');
    }
    // Frames come innermost first; collapsed lines go from the root outwards.
    for frame in key.frames.iter().rev() {
        stack.push(';');
        push_frame(&mut stack, frame);
    }
    stack
}

fn push_frame(stack: &mut String, frame: &Frame) {
    push_sanitized(stack, &frame.to_string());
}

fn push_sanitized(stack: &mut String, text: &str) {
    stack.extend(text.chars().map(|c| {
        if matches!(c, ';' | '\n' | '\r') {
            '_'
        } else {
            c
        }
    }));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::tests::{frame, sample};
    use crate::aggregate::Aggregator;
    use crate::symbolize::FrameKind;

    #[test]
    fn writes_one_sorted_line_per_stack() {
        let main = frame("main", "/srv/app.py", 30, 28);
        let handle = frame("Server.handle", "/srv/server.py", 12, 10);
        let parse = frame("parse", "/usr/lib/python3.12/json/decoder.py", 353, 343);
        let mut agg = Aggregator::new(10_000_000);
        agg.add_count(
            &sample(
                7,
                7,
                Some("MainThread"),
                vec![parse.clone(), handle.clone(), main.clone()],
            ),
            3,
        );
        agg.add(&sample(
            7,
            7,
            Some("MainThread"),
            vec![handle.clone(), main.clone()],
        ));
        agg.add_count(
            &sample(
                7,
                9,
                None,
                vec![
                    Frame::pseudo(FrameKind::Gc),
                    Frame::pseudo(FrameKind::Native),
                    main,
                ],
            ),
            2,
        );
        let mut no_line = handle;
        no_line.line = None;
        agg.add(&sample(7, 11, Some("worker;1"), vec![no_line]));

        let mut out = Vec::new();
        write(&agg.cut(), &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "thread 11 (worker_1);Server.handle (/srv/server.py) 1\n\
             thread 7 (MainThread);main (/srv/app.py:30);Server.handle (/srv/server.py:12) 1\n\
             thread 7 (MainThread);main (/srv/app.py:30);Server.handle (/srv/server.py:12);\
             parse (/usr/lib/python3.12/json/decoder.py:353) 3\n\
             thread 9;main (/srv/app.py:30);<native>;<GC> 2\n"
        );
    }

    #[test]
    fn several_processes_get_a_process_root() {
        let f = frame("f", "a.py", 1, 1);
        let mut agg = Aggregator::new(1);
        agg.add(&sample(1, 5, None, vec![f.clone()]));
        agg.add(&sample(2, 5, None, vec![f.clone()]));
        // A different first line renders the same, so the two stacks merge into one line.
        let mut moved = f;
        moved.code = std::sync::Arc::new(crate::symbolize::CodeName::new("f", "a.py", 2));
        agg.add(&sample(2, 5, None, vec![moved]));
        assert_eq!(
            lines(&agg.cut()),
            [
                "process 1;thread 5;f (a.py:1) 1",
                "process 2;thread 5;f (a.py:1) 2"
            ]
        );
    }
}
