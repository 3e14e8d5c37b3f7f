//! `rce_protection`: destructive or shell-spawning command payloads.

use super::{argv_lines, strings, Rule, RuleContext, RuleOutcome};
use aho_corasick::AhoCorasick;
use std::sync::OnceLock;

/// Blocks remote/arbitrary command execution payloads.
pub struct RceProtection;

const RCE_PATTERNS: &[(&str, &str)] = &[
    ("rm -rf /", "recursive delete of filesystem root"),
    ("rm -rf ~", "recursive delete of home"),
    ("rm -rf *", "recursive wildcard delete"),
    ("rm -fr /", "recursive delete of filesystem root"),
    ("mkfs", "filesystem format"),
    ("dd if=", "raw disk write"),
    (":(){", "fork bomb"),
    ("| sh", "pipe to shell"),
    ("|sh", "pipe to shell"),
    ("| bash", "pipe to shell"),
    ("|bash", "pipe to shell"),
    ("bash -c", "shell spawn"),
    ("sh -c", "shell spawn"),
    ("/bin/sh", "shell spawn"),
    ("/bin/bash", "shell spawn"),
    ("nc -e", "reverse shell"),
    ("ncat -e", "reverse shell"),
    ("/dev/tcp/", "reverse shell"),
    ("mkfifo", "reverse shell pipe"),
    ("$(", "command substitution"),
    ("`", "command substitution"),
    ("os.system(", "code execution"),
    ("subprocess.", "code execution"),
    ("eval(", "code execution"),
    ("exec(", "code execution"),
    ("__import__(", "code execution"),
    ("python -c", "interpreter one-liner"),
    ("perl -e", "interpreter one-liner"),
    ("chmod 777", "permission weakening"),
    ("chmod +s", "setuid"),
    ("> /dev/sd", "raw disk write"),
    ("shutdown -", "host shutdown"),
    ("rm -r -f /", "recursive delete of filesystem root"),
    ("rm -f -r /", "recursive delete of filesystem root"),
    ("rm --recursive", "recursive delete"),
    ("| python", "pipe to interpreter"),
    ("|python", "pipe to interpreter"),
    ("| perl", "pipe to interpreter"),
    ("base64 -d |", "decode and execute"),
    ("base64 -d|", "decode and execute"),
    ("${ifs}", "shell field-separator evasion"),
    (";rm ", "chained delete"),
    ("&&rm ", "chained delete"),
    ("; rm ", "chained delete"),
    ("&& rm ", "chained delete"),
    ("powershell -enc", "encoded powershell"),
    ("--no-preserve-root", "recursive delete of filesystem root"),
    ("sh <(", "process substitution into a shell"),
    ("bash <(", "process substitution into a shell"),
    ("source <(", "process substitution into a shell"),
    ("<(curl", "process substitution of a download"),
    ("<(wget", "process substitution of a download"),
    ("| zsh", "pipe to shell"),
    ("|zsh", "pipe to shell"),
    ("| ksh", "pipe to shell"),
    ("| dash", "pipe to shell"),
    ("| sudo sh", "pipe to shell"),
    ("|sudo sh", "pipe to shell"),
    ("| sudo bash", "pipe to shell"),
    ("|sudo bash", "pipe to shell"),
    ("python3 -c", "interpreter one-liner"),
    ("ruby -e", "interpreter one-liner"),
    ("node -e", "interpreter one-liner"),
    ("php -r", "interpreter one-liner"),
    ("/dev/udp/", "reverse shell"),
];

/// Prefilter triggers for [`find_deletes_system_tree`] (the root may be quoted),
/// [`rm_deletes_system_tree`] (recursion needs a flag), [`pipes_into_shell`] (the forms
/// the plain `| sh` patterns miss) and [`inline_code`].
const STRUCTURAL_TRIGGERS: [&str; 25] = [
    "find /",
    "find ~",
    "find $home",
    "find \"/",
    "find '/",
    "find \"~",
    "find '~",
    "find \"$home",
    "find '$home",
    "rm -",
    "| sudo",
    "|sudo",
    "| env ",
    "|env ",
    "| doas",
    "| /usr/bin/",
    "| /bin/",
    "sh -",
    "python",
    "pypy",
    "perl -",
    "ruby -",
    "node -",
    "nodejs -",
    "php -",
];

/// Parameter names that hold prose or markup, where a backtick quotes code (Markdown)
/// rather than substituting a command; every other pattern still applies to them.
const PROSE_KEYS: [&str; 16] = [
    "body",
    "text",
    "message",
    "content",
    "description",
    "subject",
    "title",
    "q",
    "query",
    "comment",
    "summary",
    "note",
    "notes",
    "prompt",
    "markdown",
    "caption",
];

/// System trees: any deletion by a find over them is refused.
const FIND_SYSTEM_ROOTS: [&str; 8] = ["/", "/*", "/home", "/etc", "/usr", "/var", "/boot", "/root"];
/// The home directory: a find over it that deletes without a name or path filter is refused
/// (`find ~ -name '*.pyc' -delete` is an ordinary clean-up).
const FIND_HOME_ROOTS: [&str; 6] = ["~", "~/", "~/*", "$home", "$home/", "${home}"];

/// Find actions that delete what they find.
const FIND_DELETERS: [&str; 21] = [
    " -delete",
    "-exec rm",
    "-exec /bin/rm",
    "-exec /usr/bin/rm",
    "-exec shred",
    "-exec unlink",
    "-execdir rm",
    "-execdir /bin/rm",
    "-execdir /usr/bin/rm",
    "-execdir shred",
    "-execdir unlink",
    "-ok rm",
    "-ok /bin/rm",
    "-ok /usr/bin/rm",
    "-ok shred",
    "-ok unlink",
    "-okdir rm",
    "-okdir /bin/rm",
    "-okdir /usr/bin/rm",
    "-okdir shred",
    "-okdir unlink",
];
/// Find tests that narrow a home-directory clean-up to some files.
const FIND_FILTERS: [&str; 5] = ["-name ", "-iname ", "-path ", "-ipath ", "-regex "];

/// `find / -delete`, `find ~ -exec rm {} +`, `find /etc -type f | xargs rm`: a find over a
/// system tree or the home directory that deletes what it finds. (`find ./build -delete`
/// stays allowed: project-local clean-ups are ordinary work.)
///
/// Linear in `norm`: each section between separators (`;`, `&`, `|`) is searched a fixed
/// number of times however many finds it holds (`find / find / ...` used to rescan the rest
/// of the string once per find: seconds for one 64 KB parameter).
fn find_deletes_system_tree(norm: &str) -> bool {
    let mut rest = norm;
    loop {
        let end = rest.find([';', '&', '|']).unwrap_or(rest.len());
        let (section, after) = rest.split_at(end);
        // What a single '|' feeds the find's output to ("||" feeds nothing).
        let piped = after
            .strip_prefix('|')
            .filter(|a| !a.starts_with('|'))
            .map_or("", str::trim_start);
        if section_find_deletes(section, piped) {
            return true;
        }
        match after.get(1..) {
            Some(a) if !a.is_empty() => rest = a,
            _ => return false,
        }
    }
}

/// [`find_deletes_system_tree`] for one section: a find whose root is a system or home tree,
/// with a deleting action after it (or its output piped to `xargs rm`).
fn section_find_deletes(section: &str, piped: &str) -> bool {
    let mut finds = section.match_indices("find ").peekable();
    if finds.peek().is_none() {
        return false;
    }
    // The last occurrence of each is enough: a find's own clause runs to the section end.
    let last_of = |pats: &[&str]| pats.iter().filter_map(|p| section.rfind(p)).max();
    let deletes_at = last_of(&FIND_DELETERS);
    let filter_at = last_of(&FIND_FILTERS);
    let xargs = piped.starts_with("xargs rm") || piped.starts_with("xargs -0 rm");
    finds.any(|(i, _)| {
        let start = i + 5;
        let root = section[start..].split(' ').next().unwrap_or("");
        let root = root.trim_matches(['"', '\'']);
        let system = FIND_SYSTEM_ROOTS.contains(&root);
        if !system && !FIND_HOME_ROOTS.contains(&root) {
            return false;
        }
        if !system && filter_at.is_some_and(|f| f >= start) {
            return false;
        }
        deletes_at.is_some_and(|d| d >= start) || xargs
    })
}

/// Shells and interpreters that run what is piped into them.
const PIPE_SINKS: [&str; 13] = [
    "sh", "bash", "zsh", "ksh", "dash", "fish", "python", "python3", "perl", "ruby", "node", "php",
    "pwsh",
];

/// `bash -lc 'id'`, `sh -xec ...`, `python3.11 -c ...`, `perl -E ...`, `node -p ...`: a shell or
/// interpreter given code on its command line in a flag cluster (the plain `bash -c`,
/// `python3 -c` patterns miss the clusters and versioned names). One pass over the words.
fn inline_code(norm: &str) -> bool {
    let mut words = norm.split(' ').peekable();
    while let Some(w) = words.next() {
        let base = w.trim_matches(['"', '\'']).rsplit('/').next().unwrap_or("");
        // "python3.11" is python: the name without its version.
        let name = base.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
        let code_flags: &[char] = match name {
            "sh" | "bash" | "zsh" | "ksh" | "dash" | "ash" | "fish" | "python" | "pypy" => &['c'],
            "perl" | "ruby" => &['e'],
            "node" | "nodejs" => &['e', 'p'],
            "php" => &['r'],
            _ => continue,
        };
        let Some(flag) = words.peek() else {
            return false;
        };
        if flag.starts_with('-') && !flag.starts_with("--") && flag[1..].contains(code_flags) {
            return true;
        }
    }
    false
}

/// `curl x | sudo -E bash`, `wget -qO- x | env python3`, `... | sudo -u root sh`: a pipe into
/// a shell or interpreter behind `sudo` (and its options), `env` or `VAR=value` words. `norm`
/// is lower-cased with whitespace folded.
fn pipes_into_shell(norm: &str) -> bool {
    norm.split('|').skip(1).any(|next| {
        // "||" leaves an empty segment: the command after it is not fed by a pipe.
        if next.is_empty() {
            return false;
        }
        let mut words = next.split(' ').filter(|w| !w.is_empty());
        while let Some(w) = words.next() {
            let base = w.trim_matches(['"', '\'']).rsplit('/').next().unwrap_or("");
            if PIPE_SINKS.contains(&base) {
                return true;
            }
            if matches!(base, "sudo" | "env" | "doas" | "command" | "exec" | "nohup") {
                continue;
            }
            if w.starts_with('-') {
                // sudo options that take a value: the value is not the command.
                if matches!(w, "-u" | "-g" | "-h" | "-p" | "-c" | "-d" | "-r" | "-t") {
                    words.next();
                }
                continue;
            }
            if w.contains('=') {
                continue;
            }
            return false;
        }
        false
    })
}

/// Trees whose recursive deletion is refused: the root, system directories and the home
/// directory (after quotes, a trailing `/*` and trailing slashes are removed; "" is `/`).
const RM_SYSTEM_ROOTS: [&str; 18] = [
    "", "/home", "/etc", "/usr", "/var", "/boot", "/root", "/bin", "/sbin", "/lib", "/lib64",
    "/opt", "/srv", "/dev", "~", "$home", "${home}", "/.",
];

/// `rm -rfv /`, `rm -r "/"`, `rm -fr ~`, `rm -rf -- $HOME`, `sudo rm -rf --one-file-system /`:
/// an rm with a recursive flag (any short-flag cluster holding `r`, or `--recursive`) whose
/// target is one of [`RM_SYSTEM_ROOTS`]. `norm` is lower-cased with whitespace folded.
fn rm_deletes_system_tree(norm: &str) -> bool {
    norm.split([';', '&', '|', '(', ')', '`']).any(|segment| {
        let mut words = segment.split(' ').filter(|w| !w.is_empty());
        // The first rm of a segment takes every later word as an argument (as the shell
        // does), so one pass over the segment: linear however many "rm" words it holds.
        if !words.any(|w| w.trim_matches(['"', '\'']).rsplit('/').next() == Some("rm")) {
            return false;
        }
        let (mut recursive, mut dangerous, mut operands) = (false, false, false);
        for a in words {
            let a = a.trim_matches(['"', '\'']);
            if !operands && a == "--" {
                operands = true;
            } else if !operands && a.starts_with("--") {
                recursive |= a == "--recursive";
            } else if !operands && a.starts_with('-') && a.len() > 1 {
                recursive |= a.contains('r');
            } else {
                let t = a.strip_suffix("/*").unwrap_or(a);
                let t = if t == "/" {
                    ""
                } else {
                    t.trim_end_matches('/')
                };
                dangerous |= RM_SYSTEM_ROOTS.contains(&t);
            }
        }
        recursive && dangerous
    })
}

impl Rule for RceProtection {
    fn name(&self) -> &str {
        "rce_protection"
    }
    fn evaluate(&self, ctx: &RuleContext<'_>) -> RuleOutcome {
        let mut lines = Vec::new();
        argv_lines(&ctx.cmd.params, None, &mut lines);
        let mut all = Vec::new();
        strings(&ctx.cmd.params, None, &mut all);
        all.extend(lines.iter().map(|(k, l)| (*k, l.as_str())));
        // ASCII case-insensitive, so it reads a string that needs no whitespace folding
        // as it is, without the lower-cased copy.
        static AC: OnceLock<Option<AhoCorasick>> = OnceLock::new();
        let ac = AC
            .get_or_init(|| {
                AhoCorasick::builder()
                    .ascii_case_insensitive(true)
                    .build(
                        RCE_PATTERNS
                            .iter()
                            .map(|(p, _)| *p)
                            .chain(STRUCTURAL_TRIGGERS.iter().copied()),
                    )
                    .ok()
            })
            .as_ref();
        let mut norm = String::new();
        for (key, s) in all {
            // Folding would change nothing: single spaces only, none at either end.
            let plain = !s.contains(|c: char| c.is_whitespace() && c != ' ')
                && !s.contains("  ")
                && !s.starts_with(' ')
                && !s.ends_with(' ');
            if plain && ac.is_some_and(|ac| !ac.is_match(s)) {
                continue;
            }
            // Collapse whitespace runs so "rm   -rf  /" cannot dodge the match.
            norm.clear();
            for w in s.split_whitespace() {
                if !norm.is_empty() {
                    norm.push(' ');
                }
                norm.extend(w.chars().map(|c| c.to_ascii_lowercase()));
            }
            if ac.is_some_and(|ac| !ac.is_match(&norm)) {
                continue;
            }
            // Something matched: report the first pattern in table order, as always.
            let prose = key.is_some_and(|k| PROSE_KEYS.iter().any(|p| p.eq_ignore_ascii_case(k)));
            for (pat, what) in RCE_PATTERNS {
                if norm.contains(pat) && !(prose && *pat == "`") {
                    return RuleOutcome::deny(format!("RCE pattern detected: {what}"));
                }
            }
            if find_deletes_system_tree(&norm) {
                return RuleOutcome::deny("RCE pattern detected: recursive delete via find");
            }
            if inline_code(&norm) {
                return RuleOutcome::deny("RCE pattern detected: interpreter one-liner");
            }
            if pipes_into_shell(&norm) {
                return RuleOutcome::deny("RCE pattern detected: pipe to shell");
            }
            if rm_deletes_system_tree(&norm) {
                return RuleOutcome::deny(
                    "RCE pattern detected: recursive delete of a system tree",
                );
            }
        }
        RuleOutcome::allow()
    }
}
