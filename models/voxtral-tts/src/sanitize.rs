//! Text normalisation before tokenizing, ported from mlx-audio 0.6.2
//! (`voxtral_tts/text_preprocess.py`, `sanitize_tts_input_text_for_demo`): markdown flattened,
//! invisible characters dropped, line breaks joined, money and long comma-grouped numbers spelled
//! out, textual parentheticals turned into em-dash asides, dash and punctuation runs collapsed,
//! whitespace collapsed, and a full stop added when the text does not end in terminal punctuation.
//!
//! One known difference: Python's `html.unescape` knows every HTML5 entity; this decodes numeric
//! entities and the common named ones (`&amp; &lt; &gt; &quot; &apos; &nbsp;`).

use std::sync::OnceLock;

use fancy_regex::{Captures, Regex};
use infer_core::{Error, Result};

const TERMINAL_PUNCT: &str = ".!?\u{2026}\u{061f}\u{3002}\u{ff01}\u{ff1f}";
const CURRENCY_CHARS: &str = "$€£¥₹¢";
const ONES: [&str; 10] = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"];
const TEENS: [&str; 10] =
    ["ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"];
const TENS: [&str; 10] = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"];
const SCALES: [&str; 6] = ["", "thousand", "million", "billion", "trillion", "quadrillion"];

struct Patterns {
    invisible: Regex,
    line_break: Regex,
    repeated_punct: Regex,
    ellipsis_run: Regex,
    unicode_hyphen: Regex,
    multi_hyphen: Regex,
    standalone_hyphen: Regex,
    parenthetical: Regex,
    numeric_paren: Regex,
    md_fence: Regex,
    md_image: Regex,
    md_link: Regex,
    md_inline_code: Regex,
    md_heading: Regex,
    md_unordered: Regex,
    md_ordered: Regex,
    md_blockquote: Regex,
    md_br: Regex,
    md_html_tag: Regex,
    md_autolink: Regex,
    md_url: Regex,
    token: Regex,
    spaces: Regex,
    paren_rules: Vec<(Regex, &'static str)>,
}

fn re(p: &str) -> Regex {
    Regex::new(p).expect("static pattern")
}

fn patterns() -> &'static Patterns {
    static P: OnceLock<Patterns> = OnceLock::new();
    P.get_or_init(|| Patterns {
        invisible: re("[\u{200b}\u{200e}-\u{200f}\u{2028}-\u{2029}\u{2060}-\u{2064}\u{00ad}\u{180e}\u{feff}\u{fff9}-\u{fffb}]"),
        line_break: re(r"(?:\r\n|\r|\n)+"),
        repeated_punct: re(r"([!?])\1+"),
        ellipsis_run: re(r"\.{3,}"),
        unicode_hyphen: re("[\u{2010}\u{2011}]"),
        multi_hyphen: re("[\\-\u{2013}\u{2212}]{2,}"),
        standalone_hyphen: re("(?<=\\s)[\\-\u{2013}\u{2212}](?=\\s)"),
        parenthetical: re(r"\s*\(([^()]+)\)\s*"),
        numeric_paren: re(r"^\s*[$€£¥₹¢]?\s*[+\-−–]?\d+(?:[.,]\d+)?\s*%?\s*$"),
        md_fence: re(r"```[\s\S]*?```|~~~[\s\S]*?~~~"),
        md_image: re(r"!\[([^\]]*)\]\(([^)]*)\)"),
        md_link: re(r"\[([^\]]+)\]\(([^)]*)\)"),
        md_inline_code: re(r"`([^`]+)`"),
        md_heading: re(r"(?m)^\s{0,3}#{1,6}\s*"),
        md_unordered: re(r"(?m)^\s*[-*+]\s+"),
        md_ordered: re(r"(?m)^\s*\d{1,4}[.)]\s+"),
        md_blockquote: re(r"(?m)^\s{0,3}>\s?"),
        md_br: re(r"(?i)<br\s*/?>"),
        md_html_tag: re(r"</?[a-zA-Z][^>]*>"),
        md_autolink: re(r"<https?://[^>]+>"),
        md_url: re(r"https?://\S+"),
        token: re(r"(?P<currency>(?P<symbol>[$£€¥₹¢])(?P<amount>\d[\d,]*(?:\.\d+)?))|(?P<number>(?<!\w)-?\d[\d,]*(?:\.\d+)?\b)"),
        spaces: re(r"\s+"),
        paren_rules: vec![
            (re(r"(?i)\bN\s*/\s*A\b"), "not available"),
            (re(r"\s*(?:\+/-|±)\s*"), " plus or minus "),
            (re(r"\s*>=\s*"), " greater than or equal to "),
            (re(r"\s*<=\s*"), " less than or equal to "),
            (re(r"\s*>\s*"), " greater than "),
            (re(r"\s*<\s*"), " less than "),
            (re(r"\s*~\s*"), " about "),
            (re(r"#\s*(\d+)\b"), "number $1"),
            (re(r"(?i)(\d+(?:\.\d+)?)\s*ms\b"), "$1 milliseconds"),
            (re(r"(?i)(\d+(?:\.\d+)?)\s*h\b"), "$1 hours"),
            (re(r"(\d+(?:\.\d+)?)\s*%"), "$1 percent"),
            (re(r"\s*\+\s*"), " plus "),
            (re(r"\s*=\s*"), " equals "),
            (re(r"\s+"), " "),
        ],
    })
}

fn replace_all(r: &Regex, text: &str, mut rep: impl FnMut(&Captures<str>) -> String) -> String {
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for caps in r.captures_iter(text) {
        let Ok(caps) = caps else { break };
        let m = caps.get(0).expect("group 0");
        out.push_str(&text[last..m.start()]);
        out.push_str(&rep(&caps));
        last = m.end();
    }
    out.push_str(&text[last..]);
    out
}

fn sub(r: &Regex, text: &str, with: &str) -> String {
    r.replace_all(text, with).into_owned()
}

/// The text as mlx-audio sends it to the tokenizer; an error when nothing speakable is left.
pub fn sanitize(raw: &str) -> Result<String> {
    let p = patterns();
    let mut text = flatten_markdown(raw);
    text = sub(&p.invisible, &text, "");
    text = sub(&p.line_break, &text, " ");
    text = verbalize_numbers(&text);
    text = replace_parentheticals(&text);
    text = sub(&p.unicode_hyphen, &text, "-");
    text = sub(&p.ellipsis_run, &text, "...");
    text = sub(&p.repeated_punct, &text, "$1");
    text = sub(&p.multi_hyphen, &text, "\u{2014}");
    text = replace_standalone_hyphens(&text);
    let mut text = sub(&p.spaces, &text, " ").trim().to_string();
    match text.chars().last() {
        None => return Err(Error::invalid(format!("the text to speak is empty after normalisation (got {raw:?})"))),
        Some(c) if !TERMINAL_PUNCT.contains(c) => text.push('.'),
        Some(_) => {}
    }
    Ok(text)
}

fn flatten_markdown(text: &str) -> String {
    let p = patterns();
    let mut t = sub(&p.md_fence, text, " Code example omitted. ");
    t = html_unescape(&t);
    t = sub(&p.md_br, &t, " ");
    t = replace_all(&p.md_image, &t, |c| {
        let alt = c[1].trim();
        if alt.is_empty() {
            "image".into()
        } else {
            alt.into()
        }
    });
    t = replace_all(&p.md_link, &t, |c| c[1].to_string());
    t = sub(&p.md_autolink, &t, "link");
    t = sub(&p.md_url, &t, "link");
    t = replace_all(&p.md_inline_code, &t, |c| c[1].to_string());
    t = sub(&p.md_heading, &t, "");
    t = sub(&p.md_unordered, &t, "");
    t = sub(&p.md_ordered, &t, "");
    t = sub(&p.md_blockquote, &t, "");
    sub(&p.md_html_tag, &t, " ")
}

/// Numeric character references and the common named entities.
fn html_unescape(text: &str) -> String {
    static ENTITY: OnceLock<Regex> = OnceLock::new();
    let r = ENTITY.get_or_init(|| re(r"&(#[0-9]+|#[xX][0-9a-fA-F]+|amp|lt|gt|quot|apos|nbsp);"));
    replace_all(r, text, |c| {
        let e = &c[1];
        let code = if let Some(hex) = e.strip_prefix("#x").or_else(|| e.strip_prefix("#X")) {
            u32::from_str_radix(hex, 16).ok()
        } else if let Some(dec) = e.strip_prefix('#') {
            dec.parse().ok()
        } else {
            Some(match e {
                "amp" => '&' as u32,
                "lt" => '<' as u32,
                "gt" => '>' as u32,
                "quot" => '"' as u32,
                "apos" => '\'' as u32,
                _ => 0xa0,
            })
        };
        code.and_then(char::from_u32).map_or_else(|| c[0].to_string(), String::from)
    })
}

fn replace_standalone_hyphens(text: &str) -> String {
    let p = patterns();
    replace_all(&p.standalone_hyphen, text, |c| {
        let m = c.get(0).expect("group 0");
        match text[m.end()..].chars().find(|c| !c.is_whitespace()) {
            None => m.as_str().to_string(),
            Some(next) if next.is_numeric() || CURRENCY_CHARS.contains(next) => m.as_str().to_string(),
            Some(_) => "\u{2014}".to_string(),
        }
    })
}

fn replace_parentheticals(text: &str) -> String {
    let p = patterns();
    replace_all(&p.parenthetical, text, |c| {
        let inner = c[1].trim();
        if inner.is_empty() || p.numeric_paren.is_match(inner).unwrap_or(false) {
            return c[0].to_string();
        }
        let mut n = inner.to_string();
        for (r, with) in &p.paren_rules {
            n = sub(r, &n, with);
        }
        format!("\u{2014}{}\u{2014}", n.trim())
    })
}

fn sub_thousand(n: u64, use_and: bool) -> String {
    let mut parts: Vec<String> = Vec::new();
    let (hundreds, rem) = (n / 100, n % 100);
    if hundreds > 0 {
        parts.push(format!("{} hundred", ONES[hundreds as usize]));
        if rem > 0 && use_and {
            parts.push("and".into());
        }
    }
    if rem > 0 {
        parts.push(match rem {
            1..=9 => ONES[rem as usize].to_string(),
            10..=19 => TEENS[(rem - 10) as usize].to_string(),
            _ if rem % 10 > 0 => format!("{}-{}", TENS[(rem / 10) as usize], ONES[(rem % 10) as usize]),
            _ => TENS[(rem / 10) as usize].to_string(),
        });
    }
    if parts.is_empty() {
        "zero".into()
    } else {
        parts.join(" ")
    }
}

/// Digits (commas allowed) in words; `None` past the quadrillions or for non-digits.
fn integer_words(digits: &str, use_and: bool) -> Option<String> {
    let s: String = digits.trim().chars().filter(|&c| c != ',').collect();
    if s.is_empty() || !s.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let s = s.trim_start_matches('0');
    if s.is_empty() {
        return Some("zero".into());
    }
    let mut groups: Vec<u64> = Vec::new();
    let bytes = s.as_bytes();
    let mut end = bytes.len();
    while end > 0 {
        let start = end.saturating_sub(3);
        groups.push(s[start..end].parse().ok()?);
        end = start;
    }
    if groups.len() > SCALES.len() {
        return None;
    }
    let mut parts = Vec::new();
    for i in (0..groups.len()).rev() {
        if groups[i] == 0 {
            continue;
        }
        let words = sub_thousand(groups[i], use_and && i == 0 && groups.len() > 1);
        parts.push(format!("{words} {}", SCALES[i]).trim().to_string());
    }
    Some(parts.join(" "))
}

fn digit_words(frac: &str) -> String {
    frac.chars().map(|c| ONES[c.to_digit(10).unwrap_or(0) as usize]).collect::<Vec<_>>().join("-")
}

fn number_words(token: &str, use_and: bool) -> Option<String> {
    let s = token.trim();
    if let Some(inner) = s.strip_prefix('-') {
        return (!inner.is_empty()).then(|| number_words(inner, use_and)).flatten().map(|w| format!("negative {w}"));
    }
    if s.len() == 4 && s.chars().all(|c| c.is_ascii_digit()) {
        let year: u64 = s.parse().ok()?;
        if (1400..2100).contains(&year) {
            let (first, last) = (year / 100, year % 100);
            if year == 2000 {
                return Some("two thousand".into());
            }
            if year <= 1999 {
                let head = integer_words(&first.to_string(), use_and)?;
                return Some(if last == 0 {
                    format!("{head} hundred")
                } else {
                    format!("{head} {}", sub_thousand(last, false))
                });
            }
            if (2001..=2009).contains(&year) {
                return Some(format!("two thousand {}", ONES[last as usize]));
            }
            if (2010..=2099).contains(&year) {
                return Some(format!("twenty {}", sub_thousand(last, false)));
            }
        }
    }
    match s.split_once('.') {
        None => integer_words(s, use_and),
        Some((int, frac)) if !frac.is_empty() && frac.chars().all(|c| c.is_ascii_digit()) => {
            Some(format!("{} point {}", integer_words(int, use_and)?, digit_words(frac)))
        }
        _ => None,
    }
}

/// Only comma-grouped integers of a million and more are spelled out.
fn should_verbalize(token: &str) -> bool {
    let s = token.trim().trim_start_matches('-');
    let int_part = s.split('.').next().unwrap_or("");
    let plain: String = int_part.chars().filter(|&c| c != ',').collect();
    match plain.parse::<u128>() {
        Ok(v) => (1_000_000..1_000_000_000_000_000_000).contains(&v) && int_part.contains(','),
        Err(_) => false,
    }
}

/// (singular, plural, minor singular, minor plural) of a currency symbol.
fn currency_units(symbol: char) -> (&'static str, &'static str, Option<(&'static str, &'static str)>) {
    match symbol {
        '$' => ("dollar", "dollars", Some(("cent", "cents"))),
        '£' => ("pound", "pounds", Some(("penny", "pence"))),
        '€' => ("euro", "euros", Some(("cent", "cents"))),
        '¥' => ("yen", "yen", None),
        '₹' => ("rupee", "rupees", Some(("paise", "paise"))),
        _ => ("cent", "cents", None),
    }
}

fn currency_words(symbol: char, amount: &str, use_and: bool, short: bool) -> Option<String> {
    let (whole_s, frac) = match amount.split_once('.') {
        Some((w, f)) => (w, Some(f)),
        None => (amount, None),
    };
    let whole: u128 = whole_s.replace(',', "").parse().ok()?;
    let (one, many, minor_units) = currency_units(symbol);
    let major = if whole == 1 { one } else { many };
    let decimal = |frac: &str| -> Option<String> {
        Some(format!("{} point {} {major}", integer_words(&whole.to_string(), false)?, digit_words(frac)))
    };
    if let Some(f) = frac.filter(|f| f.len() > 2) {
        return decimal(f);
    }
    let minor = frac.map(|f| format!("{f}00")[..2].parse::<u64>().unwrap_or(0));
    let minor_words = |m: u64| -> Option<String> {
        let (o, p) = minor_units.unwrap_or(("", ""));
        Some(format!("{} {}", integer_words(&m.to_string(), false)?, if m == 1 { o } else { p }))
    };
    let short = short && symbol == '$';
    if !short {
        let whole_words = integer_words(&whole.to_string(), use_and)?;
        if symbol == '¥' || symbol == '¢' {
            return match frac {
                Some(f) if !f.chars().all(|c| c == '0') => decimal(f),
                _ => Some(format!("{whole_words} {major}")),
            };
        }
        return match minor {
            None | Some(0) => Some(format!("{whole_words} {major}")),
            Some(m) if whole == 0 => minor_words(m),
            Some(m) => Some(format!("{whole_words} {major} and {}", minor_words(m)?)),
        };
    }
    match minor {
        None | Some(0) => Some(format!("{} {major}", integer_words(&whole.to_string(), false)?)),
        Some(m) if whole == 0 => minor_words(m),
        Some(m) if m <= 9 => Some(format!("{} oh {}", integer_words(&whole.to_string(), false)?, ONES[m as usize])),
        Some(m) => {
            Some(format!("{} {}", integer_words(&whole.to_string(), false)?, integer_words(&m.to_string(), false)?))
        }
    }
}

fn verbalize_numbers(text: &str) -> String {
    let p = patterns();
    let symbols: Vec<char> = p
        .token
        .captures_iter(text)
        .filter_map(|c| c.ok())
        .filter_map(|c| c.name("symbol").and_then(|s| s.as_str().chars().next()))
        .collect();
    let only_dollars = symbols.len() > 1 && symbols.iter().all(|&s| s == '$');
    // When every amount is in dollars, the first is read in full and the rest short.
    let mut seen_dollar = false;
    replace_all(&p.token, text, |c| {
        if let (Some(cur), Some(sym)) = (c.name("currency"), c.name("symbol")) {
            let symbol = sym.as_str().chars().next().unwrap_or('$');
            let short = only_dollars && symbol == '$' && seen_dollar;
            if only_dollars && symbol == '$' {
                seen_dollar = true;
            }
            return currency_words(symbol, &c["amount"], true, short).unwrap_or_else(|| cur.as_str().to_string());
        }
        let token = &c["number"];
        if !should_verbalize(token) {
            return token.to_string();
        }
        number_words(token, true).unwrap_or_else(|| token.to_string())
    })
}
