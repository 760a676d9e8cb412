//! The prompts: what the cheap model is asked to write, and how its reply is read.
//!
//! The extract contract is strict about what the sandbox accepts (starlark-rust rejects `while`,
//! `try`, f-strings, set literals, type annotations and `load`), because a filter that does not
//! compile costs a second call. The model sees the output bounded to [`SHOWN_CHARS`] (head and
//! tail), but its filter runs over the whole output, so it must select by pattern, not by
//! position.

use engine::model::SummaryLevel;

/// Characters of a tool output the model is shown: head and tail halves.
pub const SHOWN_CHARS: usize = 32_000;

/// Characters of transcript a summary prompt carries (the newest end).
pub const TRANSCRIPT_CHARS: usize = 280_000;

pub const EXTRACT_SYSTEM: &str = "\
You write a Starlark function that shortens a tool output for a coding agent, keeping only what \
the agent needs for its current task.

Contract:
- Define exactly `def filter(text):` returning a string. `text` is the whole tool output.
- Only DELETE: the result must be obtainable from `text` by deleting characters (whole lines, \
parts of lines). Never add, reword, reorder or summarize. Keep identifiers, paths, numbers and \
error messages verbatim.
- Keep everything relevant to the task: errors, failures, warnings, the lines the task mentions, \
and enough surrounding context to act on them. When unsure, keep it.
- If the output is JSON, you may `data = json.decode(text)`, drop array items or object keys, and \
`return json.encode(data)`; never change a kept value.
- Your function runs on the FULL output, not just the excerpt you see: select by content \
(patterns, keywords), never by line number or position.
- Available: str methods, list/dict, `for` loops, `if`, `json.decode`/`json.encode`, and \
`re_sub(pattern, repl, text)`, `re_findall(pattern, text)`, `re_split(pattern, text)`, \
`re_match(pattern, text)` (RE2 syntax, `re_match` searches anywhere).
- Not available (they are errors): `while`, `try`/`except`, `import`/`load`, f-strings, set \
literals or comprehensions, type annotations, `print`, file or network access.

Reply with the function only, in one ```python block.";

/// The user message of an extract call.
pub fn extract_user(output: &str, context: &str) -> String {
    format!(
        "{context}TOOL OUTPUT ({} characters{}):\n{}\n",
        output.chars().count(),
        if output.chars().count() > SHOWN_CHARS {
            ", excerpt: start and end shown"
        } else {
            ""
        },
        shown(output)
    )
}

/// A syntax or runtime error the first program hit, for the one repair round.
pub fn repair_user(program: &str, error: &str) -> String {
    format!(
        "Your filter failed in the sandbox with: {error}\n\nThe program was:\n```python\n{program}\n```\n\
         Fix it within the same contract and reply with the function only."
    )
}

/// The output as the model sees it: whole, or its head and tail around an elision line.
fn shown(output: &str) -> String {
    let count = output.chars().count();
    if count <= SHOWN_CHARS {
        return output.to_string();
    }
    let half = SHOWN_CHARS / 2;
    let head: String = output.chars().take(half).collect();
    let tail: String = output.chars().skip(count - half).collect();
    format!(
        "{head}\n[... {} characters not shown ...]\n{tail}",
        count - 2 * half
    )
}

/// The program in a reply: the first fenced block, or the whole reply.
pub fn program_of(reply: &str) -> String {
    if let Some(start) = reply.find("```") {
        let after = &reply[start + 3..];
        let body = after.split_once('\n').map_or(after, |(_, rest)| rest);
        if let Some(end) = body.find("```") {
            return body[..end].to_string();
        }
        return body.to_string();
    }
    reply.to_string()
}

pub fn summarize_system(level: SummaryLevel) -> String {
    let length = match level {
        SummaryLevel::Concise => "Be brief: a short paragraph and at most ten bullets.",
        SummaryLevel::Regular => "Be complete but compact.",
        SummaryLevel::HighlyDetailed => {
            "Be detailed: every file, command, result and decision that may matter later."
        }
    };
    format!(
        "You summarize the earlier part of a coding agent's conversation so the agent can continue \
         without it. Write the summary toward the CURRENT TASK: what was tried, what was found \
         (files, functions, error messages, numbers verbatim), what was changed, what remains \
         open. Do not invent anything. {length} Reply with the summary inside <summary></summary>."
    )
}

pub fn summarize_user(transcript: &str, task: &str) -> String {
    let count = transcript.chars().count();
    let kept: String = if count > TRANSCRIPT_CHARS {
        transcript.chars().skip(count - TRANSCRIPT_CHARS).collect()
    } else {
        transcript.to_string()
    };
    format!(
        "CURRENT TASK / QUESTION (summarize toward this):\n{task}\n\nCONVERSATION SO FAR:\n{kept}\n"
    )
}

/// The summary in a reply: inside `<summary>` tags when present (tags forced back on).
pub fn summary_of(reply: &str) -> String {
    let inner = reply
        .split_once("<summary>")
        .map(|(_, rest)| rest.split("</summary>").next().unwrap_or(rest))
        .unwrap_or(reply);
    format!("<summary>\n{}\n</summary>", inner.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_read_leniently() {
        assert_eq!(
            program_of("Here:\n```python\ndef filter(t):\n    return t\n```\nDone"),
            "def filter(t):\n    return t\n"
        );
        assert_eq!(
            program_of("def filter(t):\n    return t"),
            "def filter(t):\n    return t"
        );
        assert_eq!(
            summary_of("x <summary> a </summary> y"),
            "<summary>\na\n</summary>"
        );
        assert_eq!(summary_of("plain"), "<summary>\nplain\n</summary>");
    }

    #[test]
    fn long_outputs_are_shown_as_head_and_tail() {
        let output = "a".repeat(20_000) + &"b".repeat(20_000);
        let user = extract_user(&output, "TASK:\nx\n\n");
        assert!(user.contains("excerpt") && user.contains("8000 characters not shown"));
        assert!(user.len() < 33_000);
    }
}
