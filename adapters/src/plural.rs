//! Counts in human output with the noun in the right number: "1 task", "2 tasks", "0 files".

/// `one` when `n` is 1, else `many`.
pub fn noun<'a>(n: u64, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 { one } else { many }
}

/// `n` and its noun: `count(1, "task", "tasks")` is `1 task`.
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", noun(n, one, many))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_is_singular_and_every_other_count_plural() {
        assert_eq!(count(1, "task", "tasks"), "1 task");
        assert_eq!(count(0, "task", "tasks"), "0 tasks");
        assert_eq!(count(2, "problem", "problems"), "2 problems");
        assert_eq!(count(1, "file", "files"), "1 file");
    }
}
