//! `rce_protection`: destructive or shell-spawning command payloads.

use super::{strings, Rule, RuleContext, RuleOutcome};
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

/// Prefilter triggers for [`find_deletes_system_tree`].
const FIND_TRIGGERS: [&str; 3] = ["find /", "find ~", "find $home"];

/// System trees: any deletion by a find over them is refused.
const FIND_SYSTEM_ROOTS: [&str; 8] = ["/", "/*", "/home", "/etc", "/usr", "/var", "/boot", "/root"];
/// The home directory: a find over it that deletes without a name or path filter is refused
/// (`find ~ -name '*.pyc' -delete` is an ordinary clean-up).
const FIND_HOME_ROOTS: [&str; 6] = ["~", "~/", "~/*", "$home", "$home/", "${home}"];

/// `find / -delete`, `find ~ -exec rm {} +`, `find /etc -type f | xargs rm`: a find over a
/// system tree or the home directory that deletes what it finds. (`find ./build -delete`
/// stays allowed: project-local clean-ups are ordinary work.)
fn find_deletes_system_tree(norm: &str) -> bool {
    norm.match_indices("find ").any(|(i, _)| {
        let rest = &norm[i + 5..];
        let root = rest.split(' ').next().unwrap_or("");
        let root = root.trim_matches(['"', '\'']);
        let system = FIND_SYSTEM_ROOTS.contains(&root);
        if !system && !FIND_HOME_ROOTS.contains(&root) {
            return false;
        }
        // The find's own clause, up to the next command separator.
        let clause = rest.split([';', '&']).next().unwrap_or("");
        let (own, piped) = clause.split_once('|').unwrap_or((clause, ""));
        let filtered = ["-name ", "-iname ", "-path ", "-ipath ", "-regex "]
            .iter()
            .any(|f| own.contains(f));
        if !system && filtered {
            return false;
        }
        own.contains(" -delete")
            || own.contains("-exec rm")
            || own.contains("-execdir rm")
            || own.contains("-exec /bin/rm")
            || piped.trim_start().starts_with("xargs rm")
            || piped.trim_start().starts_with("xargs -0 rm")
    })
}

impl Rule for RceProtection {
    fn name(&self) -> &str {
        "rce_protection"
    }
    fn evaluate(&self, ctx: &RuleContext<'_>) -> RuleOutcome {
        let mut all = Vec::new();
        strings(&ctx.cmd.params, None, &mut all);
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
                            .chain(FIND_TRIGGERS.iter().copied()),
                    )
                    .ok()
            })
            .as_ref();
        let mut norm = String::new();
        for (_, s) in all {
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
            for (pat, what) in RCE_PATTERNS {
                if norm.contains(pat) {
                    return RuleOutcome::deny(format!("RCE pattern detected: {what}"));
                }
            }
            if find_deletes_system_tree(&norm) {
                return RuleOutcome::deny("RCE pattern detected: recursive delete via find");
            }
        }
        RuleOutcome::allow()
    }
}
