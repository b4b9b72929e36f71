//! The forms of one rule's text in a change: `rule` is in its writer's syntax, and an nftables
//! rule also carries its nft form ([`RuleForms`]).
//!
//! A rule of a table that iptables-nft manages, which iptables-nft can read back, is in
//! `iptables-nft-save` syntax ([`RuleSyntax::Iptables`]); every other nftables rule is in nft
//! syntax, and a rule of an iptables-nft table that iptables-nft cannot read back says why
//! (`iptables_unreadable`). Legacy x_tables rules carry none of these (their `rule` is
//! `iptables-save`'s already).

use serde::{Deserialize, Serialize};

/// Which syntax a change's `rule` is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleSyntax {
    /// `iptables-nft-save`'s (`-p tcp -m tcp --dport 80 -j ACCEPT`).
    Iptables,
    /// `nft list ruleset`'s (`tcp dport 80 counter accept`).
    Nft,
}

/// The nft-side forms of an nftables rule change; all empty for other changes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleForms {
    /// The syntax of `rule`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_syntax: Option<RuleSyntax>,
    /// The rule in `nft list ruleset` syntax (the same as `rule` when that is nft's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_nft: Option<String>,
    /// For a rule of an iptables-nft table that iptables-nft cannot read back (written there by
    /// nft): what it does not know. `rule` is then in nft syntax.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iptables_unreadable: Option<String>,
}

impl RuleForms {
    /// `rule`'s text in the writer's syntax, from the nft text and what iptables-nft makes of
    /// it (`None` for a table iptables-nft does not manage; `Ok` its text; `Err` why not).
    pub fn of(nft: &str, xt: Option<Result<&str, &str>>) -> (String, RuleForms) {
        let mut forms = RuleForms {
            rule_syntax: Some(RuleSyntax::Nft),
            rule_nft: Some(nft.to_string()),
            iptables_unreadable: None,
        };
        match xt {
            Some(Ok(text)) => {
                forms.rule_syntax = Some(RuleSyntax::Iptables);
                (text.to_string(), forms)
            }
            Some(Err(why)) => {
                forms.iptables_unreadable = Some(why.to_string());
                (nft.to_string(), forms)
            }
            None => (nft.to_string(), forms),
        }
    }

    /// True when no form is set (legacy changes, non-rule changes).
    pub fn is_empty(&self) -> bool {
        *self == RuleForms::default()
    }
}
