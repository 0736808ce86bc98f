//! Every algorithm is where a reader of the root README looks for it: its
//! crate has a row in the "Which crate" table.

use ratelab::{AlgorithmKind, AlgorithmVisitor, KnownAlgorithm, Quota};

#[test]
fn every_algorithm_s_crate_is_in_the_readme_s_crate_table() {
    struct Crate;
    impl AlgorithmVisitor for Crate {
        type Output = String;
        fn visit<A: KnownAlgorithm>(self, _: A) -> String {
            // `ratelab_gcra::Gcra` -> `ratelab-gcra`.
            let path = std::any::type_name::<A>();
            path.split("::").next().unwrap_or(path).replace('_', "-")
        }
    }
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    for kind in AlgorithmKind::ALL {
        let krate = kind.visit(Quota::per_second(1).unwrap(), Crate);
        assert!(
            readme.contains(&format!("| [`{krate}`](crates/")),
            "{kind}: its crate {krate} has no row in README.md's \"Which crate\" table"
        );
    }
}
