//! Reading enums back from their names: each enum spells its variants once, through strum's
//! `IntoStaticStr` (the name) and `VariantArray` (every variant), and these look a name up, so
//! a variant added to an enum is known by name everywhere without a second table.

/// The variant of `T` named `name`, exactly.
pub fn parse<T>(name: &str) -> Option<T>
where
    T: strum::VariantArray + Copy + Into<&'static str>,
{
    T::VARIANTS.iter().copied().find(|v| Into::<&'static str>::into(*v) == name)
}

/// The variant of `T` named `name`, in any case.
pub fn parse_any_case<T>(name: &str) -> Option<T>
where
    T: strum::VariantArray + Copy + Into<&'static str>,
{
    T::VARIANTS.iter().copied().find(|v| Into::<&'static str>::into(*v).eq_ignore_ascii_case(name))
}

/// The names of every variant of `T`, in declaration order.
pub fn all<T>() -> Vec<&'static str>
where
    T: strum::VariantArray + Copy + Into<&'static str>,
{
    T::VARIANTS.iter().map(|v| Into::<&'static str>::into(*v)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::JobState;

    #[test]
    fn names_read_back_as_their_variants() {
        for s in JobState::ALL {
            assert_eq!(parse::<JobState>(s.as_str()), Some(s));
            assert_eq!(parse_any_case::<JobState>(&s.as_str().to_lowercase()), Some(s));
        }
        assert_eq!(parse::<JobState>("running"), None, "exact unless asked");
        assert_eq!(parse::<JobState>("NOPE"), None);
        assert_eq!(all::<JobState>()[..2], ["PENDING", "SCHEDULED"]);
    }

    /// Each enum's name is its JSON spelling: strum's and serde's renames must agree.
    fn names_are_json<T>()
    where
        T: strum::VariantArray + Copy + Into<&'static str> + serde::Serialize,
    {
        for v in T::VARIANTS {
            let name: &'static str = (*v).into();
            assert_eq!(serde_json::to_value(v).unwrap(), name, "{}", std::any::type_name::<T>());
        }
    }

    #[test]
    fn every_name_table_spells_its_variants_as_the_api_does() {
        names_are_json::<JobState>();
        names_are_json::<crate::quota::QuotaKind>();
        names_are_json::<crate::output::OpenMode>();
        names_are_json::<crate::api::BucketPlacement>();
        names_are_json::<crate::endpoint::Rollout>();
    }
}
