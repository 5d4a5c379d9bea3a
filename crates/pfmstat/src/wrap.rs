//! Filling prose into lines of at most [`WIDTH`] columns, for the text
//! report and the `-l` listing (both are read in terminals and mail).

/// The widest line pfmstat writes (but for one word longer than a line).
pub const WIDTH: usize = 100;

/// Appends `text` after `prefix` (already laid out, e.g. table columns),
/// breaking between words: the first line continues `prefix`, the others
/// start with `indent` spaces. Always ends with a newline.
pub fn fill(out: &mut String, prefix: &str, indent: usize, text: &str) {
    let mut line = prefix.to_string();
    for word in text.split_whitespace() {
        let gap = usize::from(!(line.is_empty() || line.ends_with(' ')));
        let width = line.chars().count() + gap + word.chars().count();
        if width > WIDTH && !line.trim().is_empty() {
            out.push_str(line.trim_end());
            out.push('\n');
            line = " ".repeat(indent);
        } else if gap == 1 {
            line.push(' ');
        }
        line.push_str(word);
    }
    out.push_str(line.trim_end());
    out.push('\n');
}

/// `cells` separated by two spaces, after `prefix`, wrapped at [`WIDTH`]
/// with `indent` spaces before each further line; cells are never split.
pub fn cells(out: &mut String, prefix: &str, indent: usize, cells: &[String]) {
    let mut line = prefix.to_string();
    let mut width = line.chars().count();
    let mut first = true;
    for cell in cells {
        let len = cell.chars().count();
        let gap = if first { 0 } else { 2 };
        if !first && width + gap + len > WIDTH {
            out.push_str(line.trim_end());
            out.push('\n');
            line = " ".repeat(indent);
            width = indent;
        } else if !first {
            line.push_str("  ");
            width += 2;
        }
        line.push_str(cell);
        width += len;
        first = false;
    }
    out.push_str(line.trim_end());
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_to_the_width_and_indents_the_rest() {
        let mut out = String::new();
        let text = "word ".repeat(60);
        fill(&mut out, "note: ", 6, &text);
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines.len() > 1);
        assert!(lines[0].starts_with("note: word"));
        for line in &lines {
            assert!(line.chars().count() <= WIDTH, "{line}");
        }
        for line in &lines[1..] {
            assert!(line.starts_with("      word"), "{line:?}");
        }
        let words: usize = lines.iter().map(|l| l.split_whitespace().count()).sum();
        assert_eq!(words, 61, "every word once, and the prefix");
    }

    #[test]
    fn a_short_text_stays_on_the_prefix_line() {
        let mut out = String::new();
        fill(&mut out, "   0  PF_CYCLES  ", 8, "approximate: cpu-clock");
        assert_eq!(out, "   0  PF_CYCLES  approximate: cpu-clock\n");
        let mut out = String::new();
        fill(&mut out, "", 2, "");
        assert_eq!(out, "\n");
    }

    #[test]
    fn cells_wrap_whole() {
        let mut out = String::new();
        let c: Vec<String> = (0..40).map(|i| format!("cpu{i} 123456")).collect();
        cells(&mut out, "  PF6_MUX0_CYCLES ", 4, &c);
        for line in out.lines() {
            assert!(line.chars().count() <= WIDTH, "{line}");
        }
        assert_eq!(out.matches("cpu").count(), 40);
    }
}
