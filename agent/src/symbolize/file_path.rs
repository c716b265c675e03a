//! File names as a profile shows them.

/// `co_filename` without `.` and `dir/..` steps: a script started as `w1/../venv/bin/app`
/// shows as `venv/bin/app`, so one file is one name whichever way it was reached. The cleaning
/// is lexical, as `os.path.normpath`'s: a symlinked directory before a `..` is not followed
/// (the path is the target's, in its own mount namespace, and may be gone). Names without a
/// `/.` (nearly all, and `<frozen …>`, `<string>`) are kept as they are.
pub fn tidy(file: String) -> String {
    if !file.contains("/.") && !file.starts_with("./") {
        return file;
    }
    match path_clean::clean(&file).into_os_string().into_string() {
        Ok(clean) => clean,
        Err(_) => file,
    }
}

#[cfg(test)]
mod tests {
    use super::tidy;

    #[test]
    fn dot_steps_are_taken_lexically() {
        for (given, shown) in [
            (
                "/tmp/trial/w1/../venv/bin/uvicorn",
                "/tmp/trial/venv/bin/uvicorn",
            ),
            ("/srv/./app/main.py", "/srv/app/main.py"),
            ("./main.py", "main.py"),
            ("../lib/x.py", "../lib/x.py"),
            ("/../x.py", "/x.py"),
            ("/srv/.hidden/x.py", "/srv/.hidden/x.py"),
            (
                "<frozen importlib._bootstrap>",
                "<frozen importlib._bootstrap>",
            ),
            (
                "/usr/lib/python3.12/asyncio/events.py",
                "/usr/lib/python3.12/asyncio/events.py",
            ),
        ] {
            assert_eq!(tidy(given.to_owned()), shown, "{given}");
        }
    }
}
