//! The workspace's layering rules that the compiler cannot check, as tests
//! (docs/architecture.md, "Where things go").

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    /// Rust files under `dir`, recursively.
    fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                rust_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    /// A file's text before its test module (`#[cfg(test)]` at the start
    /// of a line); nothing for a test file (`tests/` or `tests.rs`).
    fn non_test_text(path: &Path) -> String {
        let tests = path.components().any(|c| c.as_os_str() == "tests")
            || path.file_name().is_some_and(|n| n == "tests.rs");
        if tests {
            return String::new();
        }
        let text = std::fs::read_to_string(path).unwrap();
        match text.find("\n#[cfg(test)]") {
            Some(at) => text[..at].to_string(),
            None => text,
        }
    }

    /// A new model of an existing family touches `pfm-model` only: no
    /// other crate's code names a model (tests aside; `pfm-abi`'s list of
    /// implementation codes and pfmd's `--model` default are the rule's
    /// two exceptions).
    #[test]
    fn no_code_outside_pfm_model_names_a_model() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let allowed = ["crates/pfm-model/", "crates/pfm-abi/src/implementation.rs"];
        let models = ["Ev4", "Ev45", "Ev5", "Ev56", "Pca56", "Ev6", "Ev67"];
        let mut files = Vec::new();
        rust_files(&root.join("crates"), &mut files);
        let mut found = Vec::new();
        for file in files {
            let relative = file
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .to_string();
            if allowed.iter().any(|a| relative.starts_with(a)) {
                continue;
            }
            let text = non_test_text(&file);
            for (n, line) in text.lines().enumerate() {
                let named = models.iter().any(|m| {
                    line.contains(&format!("Implementation::{m}"))
                        || (line.contains(&format!("\"{}\"", m.to_lowercase()))
                            && !line.contains("default_value"))
                });
                if named {
                    found.push(format!("{relative}:{}: {}", n + 1, line.trim()));
                }
            }
        }
        assert!(
            found.is_empty(),
            "code outside pfm-model names a model (ask the registry instead):\n{}",
            found.join("\n")
        );
    }
}
