//! Grading and the two outputs: a text table and a JSON report.

use std::fmt::Write;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use super::profile::Profile;
use super::scenarios::Scenario;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Grade {
    Pass,
    Fail,
    /// Every failed check is documented for the profile; the reasons.
    Deviation(Vec<&'static str>),
}

impl Grade {
    pub fn word(&self) -> &'static str {
        match self {
            Grade::Pass => "pass",
            Grade::Fail => "FAIL",
            Grade::Deviation(_) => "deviation",
        }
    }
}

#[derive(Clone, Debug)]
pub struct ScenarioResult {
    pub id: &'static str,
    pub ibta: &'static str,
    pub statement: &'static str,
    pub grade: Grade,
    pub checks: Vec<(String, bool)>,
    pub notes: Vec<String>,
    /// The scenario could not run to its end (peer error, socket error).
    pub error: Option<String>,
    pub elapsed: Duration,
    pub capture: Option<PathBuf>,
}

pub fn grade(
    s: &Scenario,
    profile: &Profile,
    checks: &[(String, bool)],
    notes: &[String],
    err: Option<io::Error>,
    elapsed: Duration,
    capture: Option<PathBuf>,
) -> ScenarioResult {
    let failed: Vec<&String> = checks.iter().filter(|c| !c.1).map(|c| &c.0).collect();
    let grade = if err.is_some() || checks.is_empty() {
        Grade::Fail
    } else if failed.is_empty() {
        Grade::Pass
    } else {
        let excuses: Option<Vec<&'static str>> =
            failed.iter().map(|c| profile.excuse(s.id, c).map(|d| d.why)).collect();
        match excuses {
            Some(mut w) => {
                w.dedup();
                Grade::Deviation(w)
            }
            None => Grade::Fail,
        }
    };
    ScenarioResult {
        id: s.id,
        ibta: s.ibta,
        statement: s.statement,
        grade,
        checks: checks.to_vec(),
        notes: notes.to_vec(),
        error: err.map(|e| e.to_string()),
        elapsed,
        capture,
    }
}

/// Counts of pass / fail / deviation.
pub fn totals(rs: &[ScenarioResult]) -> (usize, usize, usize) {
    let n = |g: fn(&Grade) -> bool| rs.iter().filter(|r| g(&r.grade)).count();
    (n(|g| *g == Grade::Pass), n(|g| *g == Grade::Fail), n(|g| matches!(g, Grade::Deviation(_))))
}

/// One line per scenario, then the failed checks and deviations, then the totals.
pub fn table(rs: &[ScenarioResult]) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{:<22} {:<9} {:>6} {:>7}  statement (IBTA)", "scenario", "grade", "checks", "ms");
    for r in rs {
        let ok = r.checks.iter().filter(|c| c.1).count();
        let _ = writeln!(
            o,
            "{:<22} {:<9} {:>3}/{:<2} {:>7}  {} ({})",
            r.id,
            r.grade.word(),
            ok,
            r.checks.len(),
            r.elapsed.as_millis(),
            r.statement,
            r.ibta
        );
        for (c, good) in &r.checks {
            if !good {
                let _ = writeln!(o, "    failed: {c}");
            }
        }
        if let Grade::Deviation(w) = &r.grade {
            for why in w {
                let _ = writeln!(o, "    documented: {why}");
            }
        }
        if let Some(e) = &r.error {
            let _ = writeln!(o, "    error: {e}");
        }
    }
    let (p, f, d) = totals(rs);
    let _ = writeln!(o, "{} scenarios: {p} pass, {f} fail, {d} documented deviation", rs.len());
    o
}

/// JSON string literal (the escaping `urxe check --json` uses).
fn js(s: &str) -> String {
    crate::check::verify::json_str(s)
}

fn js_list(items: impl Iterator<Item = String>) -> String {
    format!("[{}]", items.collect::<Vec<_>>().join(","))
}

/// The whole run as one JSON object.
pub fn json(peer: &str, profile: Profile, rs: &[ScenarioResult]) -> String {
    let (p, f, d) = totals(rs);
    let scen = js_list(rs.iter().map(|r| {
        let why = match &r.grade {
            Grade::Deviation(w) => js_list(w.iter().map(|s| js(s))),
            _ => "[]".into(),
        };
        format!(
            "{{\"id\":{},\"ibta\":{},\"statement\":{},\"grade\":{},\"checks\":{},\"notes\":{},\"deviations\":{},\"error\":{},\"ms\":{},\"capture\":{}}}",
            js(r.id),
            js(r.ibta),
            js(r.statement),
            js(r.grade.word().to_ascii_lowercase().as_str()),
            js_list(r.checks.iter().map(|(c, ok)| format!("{{\"check\":{},\"ok\":{ok}}}", js(c)))),
            js_list(r.notes.iter().map(|n| js(n))),
            why,
            r.error.as_deref().map(js).unwrap_or_else(|| "null".into()),
            r.elapsed.as_millis(),
            r.capture.as_ref().map(|c| js(&c.display().to_string())).unwrap_or_else(|| "null".into()),
        )
    }));
    format!(
        "{{\"peer\":{},\"profile\":{},\"totals\":{{\"pass\":{p},\"fail\":{f},\"deviation\":{d}}},\"scenarios\":{scen}}}\n",
        js(peer),
        js(profile.name())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scen(id: &'static str) -> Scenario {
        Scenario { id, ibta: "x", statement: "y", run: |_| Ok(()) }
    }

    #[test]
    fn grades_follow_the_checks_and_the_profile() {
        let s = scen("retry_cnt");
        let ok = vec![("a".to_string(), true)];
        let bad = vec![("a".to_string(), true), ("retry_cnt 7: 9 transmissions".to_string(), false)];
        let d = Duration::ZERO;
        assert_eq!(grade(&s, &Profile::Strict, &ok, &[], None, d, None).grade, Grade::Pass);
        assert_eq!(grade(&s, &Profile::Strict, &bad, &[], None, d, None).grade, Grade::Fail);
        assert!(matches!(grade(&s, &Profile::Rxe, &bad, &[], None, d, None).grade, Grade::Deviation(_)));
        // An undocumented failure next to a documented one still fails.
        let mixed = vec![bad[1].clone(), ("other".to_string(), false)];
        assert_eq!(grade(&s, &Profile::Rxe, &mixed, &[], None, d, None).grade, Grade::Fail);
        // No checks, or an error, is never a pass.
        assert_eq!(grade(&s, &Profile::Strict, &[], &[], None, d, None).grade, Grade::Fail);
        let e = Some(io::Error::other("peer gone"));
        assert_eq!(grade(&s, &Profile::Strict, &ok, &[], e, d, None).grade, Grade::Fail);
        // The same check in another scenario is not excused.
        assert_eq!(grade(&scen("dup_send"), &Profile::Rxe, &bad, &[], None, d, None).grade, Grade::Fail);
    }

    #[test]
    fn json_escapes_and_counts() {
        let s = scen("dup_send");
        let r = grade(&s, &Profile::Strict, &[("say \"hi\"\n".into(), true)], &[], None, Duration::ZERO, None);
        let j = json("10.0.0.2:1", Profile::Strict, &[r]);
        assert!(j.contains("\"check\":\"say \\\"hi\\\"\\u000a\""), "{j}");
        assert!(j.contains("\"totals\":{\"pass\":1,\"fail\":0,\"deviation\":0}"), "{j}");
    }
}
