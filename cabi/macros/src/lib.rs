//! The export attributes of urxe's two C libraries, re-exported by `urxe-cabi` (read its
//! `export` module for the conventions). An attribute, not a `macro_rules!` wrapper, so that
//! every entry point stays written out as `pub unsafe extern "C" fn NAME(...)`: grep, ctags
//! and go-to-definition find it by its C name.
//!
//! `#[export(CONV)]` on `pub unsafe extern "C" fn name(args) -> Ret { body }` keeps the
//! signature and makes the function `#[no_mangle]`, runs the body with the thread's
//! cancellation off, inside `catch_unwind`, and maps its value onto the C convention CONV
//! (`errno`, `neg1`, `negerrno`, `ptr`, `void`, `value(DEFAULT)`). `#[c_fn(CONV)]` is the same
//! without `#[no_mangle]` and without touching cancellation: functions C reaches only through a
//! pointer the library hands out (ops tables, the data path). `#[export(CONV, cancel = false)]`
//! is an export whose body manages cancellation itself (the blocking calls).
//!
//! Written with `proc_macro` alone: the body is the function's last brace group, the return
//! type the tokens between `->` and it; nothing else is parsed.

use proc_macro::{Delimiter, Group, TokenStream, TokenTree};

/// An exported entry point (`#[no_mangle]`, cancellation off for the call).
#[proc_macro_attribute]
pub fn export(attr: TokenStream, item: TokenStream) -> TokenStream {
    wrap(attr, item, true)
}

/// A C function reached through a pointer we hand out (not `#[no_mangle]`).
#[proc_macro_attribute]
pub fn c_fn(attr: TokenStream, item: TokenStream) -> TokenStream {
    wrap(attr, item, false)
}

fn error(msg: &str) -> TokenStream {
    format!("compile_error!({msg:?});").parse().unwrap()
}

struct Conv {
    name: String,
    default: Option<TokenStream>,
    cancel: bool,
}

fn parse_attr(attr: TokenStream, exported: bool) -> Result<Conv, &'static str> {
    let toks: Vec<TokenTree> = attr.into_iter().collect();
    let name = match toks.first() {
        Some(TokenTree::Ident(i)) => i.to_string(),
        _ => return Err("expected a convention: errno, neg1, negerrno, ptr, void or value(DEFAULT)"),
    };
    let mut rest = &toks[1..];
    let mut default = None;
    if name == "value" {
        match rest.first() {
            Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Parenthesis => {
                default = Some(g.stream());
                rest = &rest[1..];
            }
            _ => return Err("value needs its default: value(DEFAULT)"),
        }
    }
    let mut cancel = exported;
    if let Some(TokenTree::Punct(p)) = rest.first() {
        if p.as_char() != ',' {
            return Err("expected `,`");
        }
        let words: Vec<String> = rest[1..].iter().map(|t| t.to_string()).collect();
        match words.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
            ["cancel", "=", "false"] => cancel = false,
            _ => return Err("the only option is `cancel = false`"),
        }
    } else if !rest.is_empty() {
        return Err("unexpected tokens after the convention");
    }
    if !matches!(name.as_str(), "errno" | "neg1" | "negerrno" | "ptr" | "void" | "value") {
        return Err("unknown convention (errno, neg1, negerrno, ptr, void, value(DEFAULT))");
    }
    Ok(Conv { name, default, cancel })
}

fn wrap(attr: TokenStream, item: TokenStream, exported: bool) -> TokenStream {
    let conv = match parse_attr(attr, exported) {
        Ok(c) => c,
        Err(e) => return error(e),
    };
    let mut toks: Vec<TokenTree> = item.into_iter().collect();
    let body = match toks.pop() {
        Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Brace => g,
        _ => return error("expected a function with a body"),
    };
    let Some(fn_at) = toks.iter().position(|t| matches!(t, TokenTree::Ident(i) if i.to_string() == "fn")) else {
        return error("expected `fn`");
    };
    let name = match toks.get(fn_at + 1) {
        Some(TokenTree::Ident(i)) => i.to_string(),
        _ => return error("expected the function's name"),
    };
    // The return type: what follows `->` after the argument list (none: `()`).
    let mut ret = TokenStream::new();
    let args_at = fn_at + 2;
    if let Some(arrow) = toks[args_at + 1..].iter().position(|t| matches!(t, TokenTree::Punct(p) if p.as_char() == '>'))
    {
        ret = toks[args_at + 2 + arrow..].iter().cloned().collect();
    }
    let ret_s = if ret.is_empty() { "()".to_string() } else { ret.to_string() };
    let (closure_ret, finish) = match conv.name.as_str() {
        "errno" => ("Result<(), i32>".to_string(), format!("conv_errno({name:?}, r)")),
        "neg1" => (format!("Result<{ret_s}, i32>"), format!("finish({name:?}, r, (-1isize) as {ret_s})")),
        "negerrno" => (format!("Result<{ret_s}, i32>"), format!("conv_negerrno({name:?}, r)")),
        "ptr" => (format!("Result<{ret_s}, i32>"), format!("conv_ptr({name:?}, r)")),
        "void" => ("()".to_string(), format!("conv_void({name:?}, r)")),
        _ => {
            let d = conv.default.map(|d| d.to_string()).unwrap_or_default();
            (ret_s.clone(), format!("conv_value({name:?}, r, {d})"))
        }
    };
    // { [cancel off;] let r = catch_unwind(AssertUnwindSafe(move || -> R BODY)); finish }
    // with BODY the function's own brace group, so its spans (and the `// SAFETY:` comments
    // clippy looks for above its unsafe blocks) are the source's.
    let ts = |s: &str| s.parse::<TokenStream>().expect("generated tokens");
    let mut closure = ts(&format!("move || -> {closure_ret}"));
    closure.extend([TokenTree::Group(body.clone())]);
    let mut unwind_safe = ts("::std::panic::AssertUnwindSafe");
    unwind_safe.extend([TokenTree::Group(Group::new(Delimiter::Parenthesis, closure))]);
    let mut new_body = TokenStream::new();
    if conv.cancel {
        new_body.extend(ts("let _cancel = ::urxe_cabi::export::CancelOff::begin();"));
    }
    new_body.extend(ts("let r = ::std::panic::catch_unwind"));
    new_body.extend([TokenTree::Group(Group::new(Delimiter::Parenthesis, unwind_safe))]);
    new_body.extend(ts(&format!("; ::urxe_cabi::export::{finish}")));
    let mut out = ts(&format!(
        "#[doc = \"\"] #[doc = \"# Safety\"] #[doc = \"Called from C: the pointer arguments are what the function's man page says they are.\"] {} #[allow(unused_variables, clippy::missing_safety_doc)]",
        if exported { "#[no_mangle]" } else { "" }
    ));
    out.extend(toks);
    let mut g = Group::new(Delimiter::Brace, new_body);
    g.set_span(body.span());
    out.extend([TokenTree::Group(g)]);
    out
}
