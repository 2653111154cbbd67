//! `sacctmgr`, read-only: the `show`/`list` queries tools make to check an account
//! (Snakemake's `sacctmgr -n -s list user "$USER" format=account%256`), answered from berth's
//! users and projects (`assoc.rs`). Entities: `user`, `account`, `association`, `cluster`
//! (and their plurals and prefixes); conditions `name=`, `user(s)=`, `account(s)=`,
//! `cluster(s)=` or bare names after the entity, `where` and `withassoc` (`-s`) as in Slurm;
//! `format=` fields. Anything that would change accounting (`add`, `modify`, `delete`, ...)
//! is refused: users and projects are `berth admin`'s.

use std::io::Write;

use clap::Parser;

use crate::assoc::{self, CLUSTER, UserAccounts};
use crate::{Connect, Error, Result};

#[derive(Debug, Parser)]
#[command(name = "sacctmgr", about = "Show berth's users and projects as Slurm's accounts", infer_long_args = true)]
pub struct Args {
    #[command(flatten)]
    pub table: assoc::TableFlags,
    /// With each entity's associations
    #[arg(short = 's', long)]
    pub associations: bool,
    /// Accepted (berth's sacctmgr changes nothing)
    #[arg(short = 'i', long)]
    pub immediate: bool,
    /// Accepted
    #[arg(short = 'Q', long)]
    pub quiet: bool,
    /// Accepted
    #[arg(short = 'r', long)]
    pub readonly: bool,
    /// Accepted
    #[arg(short = 'v', long, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Print the version
    #[arg(short = 'V', long)]
    pub version: bool,
    /// `show|list ENTITY [where] [CONDITION=VALUE...] [format=FIELDS]`
    #[arg(value_name = "COMMAND")]
    pub words: Vec<String>,
}

/// What is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entity {
    User,
    Account,
    Association,
    Cluster,
}

/// A field of sacctmgr's tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    User,
    DefaultAccount,
    Admin,
    Cluster,
    Account,
    Partition,
    Share,
    Qos,
    DefaultQos,
    Description,
    Organization,
    ParentName,
}

const FIELDS: [(&str, &str, i32, Field); 12] = [
    ("User", "User", 10, Field::User),
    ("DefaultAccount", "Def Acct", 10, Field::DefaultAccount),
    ("AdminLevel", "Admin", 9, Field::Admin),
    ("Cluster", "Cluster", 10, Field::Cluster),
    ("Account", "Account", 10, Field::Account),
    ("Partition", "Partition", 10, Field::Partition),
    ("Share", "Share", 9, Field::Share),
    ("QOS", "QOS", 20, Field::Qos),
    ("DefaultQOS", "Def QOS", 9, Field::DefaultQos),
    ("Description", "Descr", 20, Field::Description),
    ("Organization", "Org", 20, Field::Organization),
    ("ParentName", "Par Name", 10, Field::ParentName),
];

/// One row: a user, an account, or a user in an account.
#[derive(Debug, Clone, Default)]
struct Row {
    user: Option<UserAccounts>,
    account: Option<String>,
}

/// The query the words ask.
#[derive(Debug, Default)]
struct Query {
    entity: Option<Entity>,
    users: Vec<String>,
    accounts: Vec<String>,
    format: Option<String>,
    withassoc: bool,
}

pub async fn run(args: Args, connect: &dyn Connect, out: &mut dyn Write) -> Result<()> {
    if args.version {
        writeln!(out, "{}", crate::version_line())?;
        return Ok(());
    }
    let q = parse(&args.words)?;
    let entity =
        q.entity.ok_or_else(|| Error::Usage("show what? give user, account, association or cluster".into()))?;
    let users = assoc::asked(&connect()?, Some(&q.users)).await?;
    let withassoc = q.withassoc || args.associations;
    let rows = rows(entity, &users, &q.accounts, withassoc);
    let default = default_format(entity, withassoc);
    let columns = assoc::columns(q.format.as_deref().unwrap_or(default), &FIELDS)?;
    let table = assoc::render(&columns, &rows, value, args.table.layout(), args.table.noheader);
    out.write_all(table.as_bytes())?;
    Ok(())
}

/// Reads `show ENTITY [where] [withassoc] [KEY=VALUE | NAME]...`.
fn parse(words: &[String]) -> Result<Query> {
    let mut words = words.iter();
    match words.next().map(|w| w.to_ascii_lowercase()) {
        Some(w) if ["show", "list"].iter().any(|c| c.starts_with(&w)) && w.len() >= 2 => {}
        Some(w) => {
            return Err(Error::Usage(format!(
                "`{w}`: berth's sacctmgr only shows (show/list): users and projects are `berth admin`'s"
            )));
        }
        None => return Err(Error::Usage("no command: use e.g. `sacctmgr show user NAME`".into())),
    }
    let mut q = Query::default();
    let entity_word = words.next().map(|w| w.to_ascii_lowercase()).unwrap_or_default();
    let entity = entity_of(&entity_word).ok_or_else(|| {
        Error::Usage(format!("unknown entity `{entity_word}`: use user, account, association or cluster"))
    })?;
    q.entity = Some(entity);
    let list = |v: &str| v.split(',').filter(|s| !s.is_empty()).map(str::to_string).collect::<Vec<_>>();
    for w in words {
        let lower = w.to_ascii_lowercase();
        if lower == "where" {
            continue;
        }
        if lower == "withassoc" || lower == "withassocs" {
            q.withassoc = true;
            continue;
        }
        match w.split_once('=') {
            Some((k, v)) => match k.to_ascii_lowercase().as_str() {
                "format" => q.format = Some(v.to_string()),
                "name" | "names" => match entity {
                    Entity::Account => q.accounts.extend(list(v)),
                    Entity::Cluster => {}
                    _ => q.users.extend(list(v)),
                },
                "user" | "users" => q.users.extend(list(v)),
                "account" | "accounts" | "acct" | "accts" => q.accounts.extend(list(v)),
                "cluster" | "clusters" => {}
                other => return Err(Error::Usage(format!("Unknown condition: {other}={v}"))),
            },
            None => match entity {
                Entity::Account => q.accounts.extend(list(w)),
                Entity::User | Entity::Association => q.users.extend(list(w)),
                Entity::Cluster => {}
            },
        }
    }
    Ok(q)
}

fn entity_of(word: &str) -> Option<Entity> {
    // Any prefix long enough to tell them apart, singular or plural (`u`, `acc`, `assoc`, `users`).
    let is = |full: &str, min: usize| word.len() >= min && full.starts_with(word);
    if is("users", 1) {
        Some(Entity::User)
    } else if is("accounts", 3) {
        Some(Entity::Account)
    } else if is("associations", 3) {
        Some(Entity::Association)
    } else if is("clusters", 1) {
        Some(Entity::Cluster)
    } else {
        None
    }
}

/// Slurm's default columns of each listing (those berth has).
fn default_format(entity: Entity, withassoc: bool) -> &'static str {
    match (entity, withassoc) {
        (Entity::User, false) => "User,DefaultAccount,AdminLevel",
        (Entity::User, true) => "User,DefaultAccount,AdminLevel,Cluster,Account,Partition,Share,QOS,DefaultQOS",
        (Entity::Account, false) => "Account,Description,Organization",
        (Entity::Account, true) => "Account,Description,Organization,Cluster,ParentName,User,Share,QOS,DefaultQOS",
        (Entity::Association, _) => "Cluster,Account,User,Partition,Share,QOS,DefaultQOS",
        (Entity::Cluster, _) => "Cluster",
    }
}

/// The rows of a listing: users (one per association with `withassoc`), accounts (and
/// their users), associations, or the one cluster.
fn rows(entity: Entity, users: &[UserAccounts], accounts: &[String], withassoc: bool) -> Vec<Row> {
    let in_accounts = |a: &String| accounts.is_empty() || accounts.contains(a);
    let assocs = || {
        users.iter().flat_map(|u| {
            u.accounts
                .iter()
                .filter(|a| in_accounts(a))
                .map(|a| Row { user: Some(u.clone()), account: Some(a.clone()) })
        })
    };
    match (entity, withassoc) {
        (Entity::User, false) => users.iter().map(|u| Row { user: Some(u.clone()), account: None }).collect(),
        (Entity::User, true) | (Entity::Association, _) => assocs().collect(),
        (Entity::Account, _) => {
            let mut names: Vec<String> = users.iter().flat_map(|u| u.accounts.iter().cloned()).collect();
            names.sort();
            names.dedup();
            let mut out = Vec::new();
            for a in names.into_iter().filter(|a| in_accounts(a)) {
                out.push(Row { user: None, account: Some(a.clone()) });
                if withassoc {
                    let members = users.iter().filter(|u| u.accounts.contains(&a));
                    out.extend(members.map(|u| Row { user: Some(u.clone()), account: Some(a.clone()) }));
                }
            }
            out
        }
        (Entity::Cluster, _) => vec![Row::default()],
    }
}

fn value(field: Field, r: &Row) -> String {
    let user = r.user.as_ref();
    match field {
        Field::User => user.map(|u| u.shown.clone()).unwrap_or_default(),
        Field::DefaultAccount => user.and_then(|u| u.accounts.first().cloned()).unwrap_or_default(),
        Field::Admin => user.map(|u| if u.admin { "Administrator" } else { "None" }.to_string()).unwrap_or_default(),
        Field::Cluster => CLUSTER.to_string(),
        Field::Account => r.account.clone().unwrap_or_default(),
        Field::Partition => String::new(),
        Field::Share => {
            if r.user.is_some() || r.account.is_some() {
                "1".into()
            } else {
                String::new()
            }
        }
        Field::Qos => "normal".into(),
        Field::DefaultQos => String::new(),
        Field::Description | Field::Organization => {
            if user.is_none() {
                r.account.clone().unwrap_or_default()
            } else {
                String::new()
            }
        }
        Field::ParentName => {
            if user.is_none() && r.account.is_some() {
                "root".into()
            } else {
                String::new()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assoc::Layout;

    fn words(s: &str) -> Vec<String> {
        shell_words::split(s).unwrap()
    }

    fn users() -> Vec<UserAccounts> {
        vec![
            UserAccounts { shown: "root".into(), user: "admin".into(), admin: true, accounts: vec!["admin".into()] },
            UserAccounts {
                shown: "alice".into(),
                user: "alice".into(),
                admin: false,
                accounts: vec!["alice".into(), "vision".into()],
            },
        ]
    }

    fn table(line: &str, parsable2: bool) -> String {
        let q = parse(&words(line)).unwrap();
        let entity = q.entity.unwrap();
        let rows = rows(entity, &users(), &q.accounts, q.withassoc);
        let columns =
            assoc::columns(q.format.as_deref().unwrap_or(default_format(entity, q.withassoc)), &FIELDS).unwrap();
        let layout = if parsable2 { Layout::Parsable { trailing: false } } else { Layout::Columns };
        assoc::render(&columns, &rows, value, layout, parsable2)
    }

    #[test]
    fn snakemakes_account_check() {
        // `sacctmgr -n -s list user "$USER" format=account%256`: one line per account.
        let q = parse(&words("list user root withassoc format=account%256")).unwrap();
        assert_eq!(
            (q.entity, q.users.as_slice(), q.withassoc),
            (Some(Entity::User), ["root".to_string()].as_slice(), true)
        );
        let out = table("list user withassoc format=account%256", true);
        assert_eq!(out, "admin\nalice\nvision\n");
        let cols = table("list user withassoc format=account%12", false);
        assert_eq!(cols.lines().nth(2), Some("       admin "));
    }

    #[test]
    fn users_accounts_and_associations() {
        assert_eq!(table("show user", true), "root|admin|Administrator\nalice|alice|None\n");
        assert_eq!(table("show assoc where account=vision format=cluster,account,user", true), "berth|vision|alice\n");
        assert_eq!(
            table("show account format=account,descr,parent", true),
            "admin|admin|root\nalice|alice|root\nvision|vision|root\n"
        );
        assert_eq!(
            table("show accounts withassoc names=vision format=account,user", true).trim(),
            "vision|\nvision|alice"
        );
        assert_eq!(table("list cluster format=cluster", true), "berth\n");
    }

    #[test]
    fn changes_and_unknown_words_are_refused() {
        assert!(parse(&words("add user bob account=x")).unwrap_err().to_string().contains("only shows"));
        assert!(parse(&words("show qos")).unwrap_err().to_string().contains("unknown entity `qos`"));
        assert!(parse(&words("show user where bogus=1")).unwrap_err().to_string().contains("Unknown condition"));
        assert!(parse(&[]).is_err());
    }
}
