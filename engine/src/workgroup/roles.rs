//! The roles a plan's task may have: a closed vocabulary, each with what it implies. A role is
//! looked up, never guessed from the words in it; an unknown one is refused with the closest
//! names. README's "Roles" table is this one.
//!
//! The `strata ce` wire still reads roles the way the reference runtime does (a `builder`,
//! `writer` or `implementer` token makes a writer, `reviewer` a reviewer); every role here
//! classifies the same way on the wire (a unit test checks it), so a plan's role and the routing
//! facts built from it never disagree.

/// One role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Role {
    /// The name a plan writes.
    pub name: &'static str,
    /// Whether a task in this role writes files (it must own at least one; other roles own none).
    pub writes: bool,
    /// The context profile a task in this role gets unless the task or the plan names one.
    pub profile: &'static str,
    /// Whether it reviews others' work: it writes nothing and never resumes a builder's session.
    pub reviews: bool,
    /// What the role is for (README's table).
    pub about: &'static str,
}

/// Every role.
pub const ROLES: [Role; 7] = [
    Role {
        name: "planner",
        writes: false,
        profile: "orchestrator",
        reviews: false,
        about: "splits the change into tasks",
    },
    Role {
        name: "architect",
        writes: false,
        profile: "orchestrator",
        reviews: false,
        about: "designs across entities",
    },
    Role {
        name: "analyst",
        writes: false,
        profile: "backend-developer",
        reviews: false,
        about: "reads code and specifications, writes nothing",
    },
    Role {
        name: "backend-builder",
        writes: true,
        profile: "backend-developer",
        reviews: false,
        about: "implements backend modules",
    },
    Role { name: "ui-builder", writes: true, profile: "ui-developer", reviews: false, about: "implements screens" },
    Role { name: "test-builder", writes: true, profile: "backend-developer", reviews: false, about: "writes tests" },
    Role { name: "reviewer", writes: false, profile: "reviewer", reviews: true, about: "reviews the builders' work" },
];

/// The role named `name`.
pub fn role(name: &str) -> Option<&'static Role> {
    ROLES.iter().find(|r| r.name == name)
}

/// Why `name` is not a role: the closest names, or all of them.
pub fn unknown(name: &str) -> String {
    let names: Vec<String> = ROLES.iter().map(|r| r.name.to_owned()).collect();
    let near = crate::knowledge::closest(name, names.iter());
    let listed = if near.is_empty() { names } else { near };
    format!("{name:?} is not a role; did you mean {}? (roles: README, \"Roles\")", listed.join(" or "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ce::router::{is_reviewer_role, is_writer_role};

    #[test]
    fn every_role_classifies_on_the_wire_as_the_table_says() {
        for r in ROLES {
            assert_eq!(is_writer_role(Some(r.name)), r.writes, "{}", r.name);
            assert_eq!(is_reviewer_role(Some(r.name)), r.reviews, "{}", r.name);
            assert!(crate::context::profile::BUILTIN.iter().any(|(p, _)| *p == r.profile), "{}", r.profile);
            assert!(!(r.writes && r.reviews), "{}", r.name);
        }
    }

    #[test]
    fn an_unknown_role_names_the_closest() {
        assert!(role("banana").is_none());
        assert!(unknown("backend-bilder").contains("backend-builder"), "{}", unknown("backend-bilder"));
        assert!(unknown("zzzzzzzzzzzzzz").contains("planner"));
    }

    fn checked(
        tasks: serde_json::Value,
        profile: Option<&str>,
    ) -> Result<crate::workgroup::plan::Checked, Vec<String>> {
        let mut plan = serde_json::json!({"workgroup": "wg", "pipeline": "light", "task": tasks});
        if let Some(p) = profile {
            plan["profile"] = p.into();
        }
        let plan: crate::workgroup::plan::Plan = serde_json::from_value(plan).expect("plan");
        crate::workgroup::plan::check(&plan).map_err(|ps| ps.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn a_plan_names_roles_from_the_table_and_gets_the_profile_it_says_never_a_guess() {
        let t = |id: &str, role: &str, owns: &[&str]| serde_json::json!({"id": id, "role": role, "objective": "Do it.", "owns": owns});
        let refused = checked(
            serde_json::json!([t("a", "banana", &[]), t("b", "tests", &["t/"]), t("c", "reviewer", &["src/"])]),
            None,
        )
        .expect_err("refused");
        assert!(
            refused.iter().any(|p| p.contains("task a: role") && p.contains("\"banana\" is not a role")),
            "{refused:?}"
        );
        assert!(refused.iter().any(|p| p.contains("task b: role") && p.contains("test-builder")), "{refused:?}");
        assert!(
            refused.iter().any(|p| p.contains("task c: owns") && p.contains("role reviewer writes nothing")),
            "{refused:?}"
        );
        // The task's profile, else the plan's, else the role's.
        let plan = checked(
            serde_json::json!([t("ui", "ui-builder", &["web/a/"]), t("tests", "test-builder", &["web/t/"])]),
            None,
        )
        .expect("checks");
        let profiles: Vec<_> = plan.tasks.iter().map(|t| t.spec.profile.clone().unwrap_or_default()).collect();
        assert_eq!(profiles, ["ui-developer", "backend-developer"]);
        let mut own = t("ui", "ui-builder", &["web/a/"]);
        own["profile"] = "reviewer".into();
        let plan = checked(serde_json::json!([own, t("tests", "test-builder", &["web/t/"])]), Some("orchestrator"))
            .expect("checks");
        let profiles: Vec<_> = plan.tasks.iter().map(|t| t.spec.profile.clone().unwrap_or_default()).collect();
        assert_eq!(profiles, ["reviewer", "orchestrator"]);
    }
}
