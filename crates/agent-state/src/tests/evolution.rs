//! Genomes, mutation, fitness, selection and the family tree.

use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::{Value, json};

use crate::Timestamp;
use crate::evolution::*;
use crate::ooda::{Modification, ModificationType, SafetyLevel};

fn permissions() -> Vec<String> {
    ["read_file", "shell", "write_file"].map(String::from).to_vec()
}

fn base() -> GenomeConfig {
    let mut config = GenomeConfig::new("executor");
    config.max_retries = 1;
    config.tools = vec!["write_file".into(), "shell".into()];
    config.strategy.insert("tool_timeout_ms".into(), json!(5000));
    config
}

fn genesis() -> Genome {
    Genome::genesis(base(), permissions()).unwrap()
}

fn space() -> SearchSpace {
    SearchSpace::new(vec![
        Gene::int("max_retries", 0, 5),
        Gene::choice("strategy.tool_timeout_ms", vec![json!(300), json!(1000), json!(5000)]),
        Gene { target: GeneTarget::Tools, kind: GeneKind::Tools { min: 1 } },
        Gene {
            target: GeneTarget::Prompt,
            kind: GeneKind::Prompt {
                variants: vec!["be brief".into(), "check twice".into()],
                from_reasoner: false,
            },
        },
        Gene {
            target: GeneTarget::Field("temperature".into()),
            kind: GeneKind::Float { min: 0.0, max: 1.0, step: 0.2 },
        },
    ])
}

fn change(kind: ModificationType, target: &str, change: Value) -> Modification {
    Modification {
        modification_type: kind,
        target: target.into(),
        change,
        safety_level: SafetyLevel::LOW,
        validation_required: true,
    }
}

/// The id of the genome above (the SHA-256 of the canonical text below, checked with Python's
/// hashlib): it must not change from run to run, machine to
/// machine or release to release (a changed canonical form would orphan every recorded tree).
const KNOWN_ID: &str = "84f4100fc7222704a3ff7656ef5f0e645a849a592d5f4228a9e64c97a19be3d2";

#[test]
fn a_genome_id_is_the_sha256_of_its_canonical_form_and_stable() {
    let g = genesis();
    assert_eq!(g.id.as_str().len(), 64);
    assert_eq!(g.id, genesis().id, "the same configuration, the same id");
    let canonical = g.canonical().unwrap();
    assert_eq!(
        canonical,
        r#"{"code_hash":null,"config":{"max_retries":1,"model":null,"prompt":"","role":"executor","strategy":{"tool_timeout_ms":5000},"temperature":null,"timeout_ms":30000,"tools":["shell","write_file"]},"state_version":1}"#
    );
    assert_eq!(g.id.as_str(), KNOWN_ID);
    // Tool order does not matter; the lineage starts with the genome itself.
    let mut reordered = base();
    reordered.tools.reverse();
    assert_eq!(Genome::genesis(reordered, permissions()).unwrap().id, g.id);
    assert_eq!(g.lineage_path, vec![g.id.clone()]);
    g.verify().unwrap();
}

/// One change of a configuration.
type Change = Box<dyn Fn(&mut GenomeConfig)>;

#[test]
fn any_change_of_configuration_code_or_version_changes_the_id() {
    let g = genesis();
    let mut seen = vec![g.id.clone()];
    let variants: Vec<Change> = vec![
        Box::new(|c| c.role = "builder".into()),
        Box::new(|c| c.prompt = "x".into()),
        Box::new(|c| c.model = Some("m".into())),
        Box::new(|c| c.temperature = Some(0.5)),
        Box::new(|c| c.tools = vec!["shell".into()]),
        Box::new(|c| c.max_retries = 2),
        Box::new(|c| c.timeout_ms = 1000),
        Box::new(|c| {
            c.strategy.insert("tool_timeout_ms".into(), json!(1000));
        }),
        Box::new(|c| {
            c.strategy.insert("other".into(), json!(true));
        }),
    ];
    for change in variants {
        let mut config = base();
        change(&mut config);
        let id = Genome::genesis(config, permissions()).unwrap().id;
        assert!(!seen.contains(&id), "every change gives a new id");
        seen.push(id);
    }
    let with_code = Genome::genesis_with_code(
        base(),
        BTreeMap::from([("notes.md".to_owned(), "hi".to_owned())]),
        permissions(),
    )
    .unwrap();
    assert!(with_code.code_hash.is_some() && !seen.contains(&with_code.id));
    let mut versioned = genesis();
    versioned.state_version = 2;
    assert_ne!(genome_id(&versioned.config, None, 2).unwrap(), g.id);
    // A tampered genome does not verify.
    let mut tampered = genesis();
    tampered.config.max_retries = 4;
    assert!(tampered.verify().is_err());
}

#[test]
fn spawn_applies_a_mutation_and_links_the_child_to_its_parent() {
    let g = genesis();
    let child = g
        .spawn(&change(ModificationType::Config, "max_retries", json!({"value": 3})), &space())
        .unwrap();
    assert_eq!(child.config.max_retries, 3);
    assert_eq!((child.generation, child.state_version), (1, 2));
    assert_eq!(child.parent_id.as_ref(), Some(&g.id));
    assert_eq!(child.lineage_path, vec![g.id.clone(), child.id.clone()]);
    let grandchild = child
        .spawn(
            &change(ModificationType::Behavior, "tool_timeout_ms", json!({"value": 1000})),
            &space(),
        )
        .unwrap();
    assert_eq!(grandchild.lineage_path.len(), 3);
    assert_eq!(grandchild.config.strategy["tool_timeout_ms"], json!(1000));
    let prompted = g
        .spawn(&change(ModificationType::Prompt, "prompt", json!({"text": "be brief"})), &space())
        .unwrap();
    assert_eq!(prompted.config.prompt, "be brief");
    let coded = g
        .spawn(
            &change(ModificationType::Code, "agent/notes.md", json!({"content": "v2"})),
            &space(),
        )
        .unwrap();
    assert_eq!(coded.code["agent/notes.md"], "v2");
    assert!(coded.code_hash.is_some());
}

#[test]
fn a_mutation_outside_its_bounds_is_refused_naming_the_field() {
    let g = genesis();
    let err = g
        .spawn(&change(ModificationType::Config, "max_retries", json!({"value": 9})), &space())
        .unwrap_err();
    assert!(matches!(&err, EvolutionError::OutOfBounds { field, .. } if field == "max_retries"));
    assert!(err.to_string().contains("9 is outside 0..=5"), "{err}");
    let err = g
        .spawn(
            &change(ModificationType::Behavior, "tool_timeout_ms", json!({"value": 42})),
            &space(),
        )
        .unwrap_err();
    assert!(err.to_string().contains("strategy.tool_timeout_ms"), "{err}");
    let err = g
        .spawn(&change(ModificationType::Prompt, "prompt", json!({"text": "anything"})), &space())
        .unwrap_err();
    assert!(err.to_string().contains("prompt"), "{err}");
    let err = g
        .spawn(&change(ModificationType::Config, "colour", json!({"value": 1})), &space())
        .unwrap_err();
    assert!(matches!(&err, EvolutionError::Mutation { field, .. } if field == "colour"), "{err}");
    let err = g
        .spawn(&change(ModificationType::Config, "max_retries", json!({"value": "many"})), &space())
        .unwrap_err();
    assert!(err.to_string().contains("max_retries"), "{err}");
    let err = g
        .spawn(&change(ModificationType::Code, "../escape", json!({"content": "x"})), &space())
        .unwrap_err();
    assert!(err.to_string().contains("inside the workspace"), "{err}");
}

#[test]
fn a_tool_beyond_the_permissions_is_refused() {
    let g = genesis();
    let err = g
        .spawn(
            &change(ModificationType::Architecture, "tools", json!({"add": ["http_get"]})),
            &space(),
        )
        .unwrap_err();
    assert!(matches!(err, EvolutionError::WidensPermissions { .. }), "{err}");
    // Adding back a permitted tool is fine.
    let child = g
        .spawn(
            &change(ModificationType::Architecture, "tools", json!({"add": ["read_file"]})),
            &space(),
        )
        .unwrap();
    assert_eq!(child.config.tools, permissions());
    // Fewer than the gene's minimum is out of bounds.
    let err = g
        .spawn(
            &change(
                ModificationType::Architecture,
                "tools",
                json!({"remove": ["shell", "write_file"]}),
            ),
            &space(),
        )
        .unwrap_err();
    assert!(matches!(err, EvolutionError::OutOfBounds { .. }), "{err}");
    let mut config = base();
    config.tools.push("http_get".into());
    assert!(matches!(
        Genome::genesis(config, permissions()),
        Err(EvolutionError::WidensPermissions { .. })
    ));
}

#[test]
fn settings_name_the_field_that_is_wrong() {
    let check = |f: fn(&mut EvolutionSettings), field: &str| {
        let mut s = EvolutionSettings::new(4, 3, 1);
        f(&mut s);
        let err = s.validate().unwrap_err();
        assert!(matches!(&err, EvolutionError::Field { field: f, .. } if f == field), "{err}");
    };
    check(|s| s.population = 0, "population");
    check(|s| s.generations = 0, "generations");
    check(|s| s.threshold = f64::NAN, "threshold");
    check(|s| s.elitism = 4, "elitism");
    check(|s| s.mutations = 0, "mutations");
    check(|s| s.concurrency = 0, "concurrency");
    check(|s| s.weights.safety = -1.0, "weights.safety");
    check(|s| s.weights = FitnessWeights { success: 0.0, efficiency: 0.0, safety: 0.0 }, "weights");
    EvolutionSettings::new(4, 3, 1).validate().unwrap();
    let population_zero = EvolutionSettings::new(0, 3, 1).validate().unwrap_err();
    assert_eq!(population_zero.to_string(), "`population` is 0; it must be 1 to 10000");
}

#[test]
fn genes_are_checked() {
    let bad = [
        Gene::int("max_retries", 5, 1),
        Gene { target: GeneTarget::Prompt, kind: GeneKind::Int { min: 0, max: 1, step: 1 } },
        Gene::choice("model", vec![json!("only-one")]),
        Gene {
            target: GeneTarget::Prompt,
            kind: GeneKind::Prompt { variants: vec![], from_reasoner: false },
        },
        Gene {
            target: GeneTarget::Field("temperature".into()),
            kind: GeneKind::Float { min: 0.0, max: f64::INFINITY, step: 0.1 },
        },
    ];
    for gene in bad {
        assert!(SearchSpace::new(vec![gene.clone()]).validate().is_err(), "{gene:?}");
    }
    let twice =
        SearchSpace::new(vec![Gene::int("max_retries", 0, 1), Gene::int("max_retries", 0, 2)]);
    assert!(twice.validate().unwrap_err().to_string().contains("declared twice"));
    assert!(GeneTarget::parse("colour").is_err());
    assert_eq!(GeneTarget::parse("strategy.x").unwrap(), GeneTarget::Strategy("x".into()));
    space().validate().unwrap();
}

#[test]
fn fitness_combines_with_the_seeds_weights_and_refuses_non_finite_scores() {
    let f = Fitness::weighted(1.0, 0.5, 0.0, &FitnessWeights::default());
    assert!((f.overall - (0.4 + 0.15)).abs() < 1e-12);
    f.check().unwrap();
    let mut nan = f.clone();
    nan.overall = f64::NAN;
    assert!(nan.check().is_err());
    let mut inf = f.clone();
    inf.scores.insert("calls".into(), f64::INFINITY);
    assert!(inf.check().unwrap_err().to_string().contains("calls"));
    let mut over = f;
    over.overall = 1.5;
    assert!(over.check().is_err());
    assert_eq!(Fitness::failed("boom").overall, 0.0);
}

#[test]
fn selection_kills_below_the_threshold_and_keeps_the_elite() {
    let ids: Vec<GenomeId> =
        (0..4).map(|i| GenomeId::parse(&format!("{i:064x}")).unwrap()).collect();
    let scored: Vec<(&GenomeId, f64)> = ids.iter().zip([0.2, 0.9, 0.5, 0.7]).collect();
    let mut settings = EvolutionSettings::new(4, 1, 0);
    settings.elitism = 2;
    let s = select(&scored, &settings);
    assert_eq!(s.fates, vec![Fate::Died, Fate::Survived, Fate::Survived, Fate::Survived]);
    assert_eq!(s.ranked, vec![1, 3, 2]);
    assert_eq!(s.elite, vec![1, 3]);
}

#[test]
fn the_rng_is_a_function_of_its_seed() {
    let a: Vec<u64> = (0..5)
        .map({
            let mut r = SeededRng::new(9);
            move |_| r.next_u64()
        })
        .collect();
    let b: Vec<u64> = (0..5)
        .map({
            let mut r = SeededRng::new(9);
            move |_| r.next_u64()
        })
        .collect();
    assert_eq!(a, b);
    assert_ne!(SeededRng::derive(9, 1).next_u64(), SeededRng::derive(9, 2).next_u64());
    let mut r = SeededRng::new(1);
    assert!((0..1000).all(|_| r.below(7) < 7));
    assert_eq!(r.below(0), 0);
}

fn event(
    genome: &str,
    parent: Option<&str>,
    generation: u32,
    event_type: EvolutionaryEventType,
    payload: Value,
    fitness: Option<f64>,
) -> EvolutionaryEvent {
    let id = |s: &str| GenomeId::parse(&format!("{s:0>64}")).unwrap();
    EvolutionaryEvent {
        timestamp: Timestamp(1),
        genome_id: id(genome),
        parent_id: parent.map(id),
        generation,
        event_type,
        payload,
        fitness_metrics: fitness.map(|f| BTreeMap::from([("overall_fitness".to_owned(), f)])),
        agent_id: "evolution/0/0".into(),
        lineage_path: vec![],
    }
}

#[test]
fn the_family_tree_is_rebuilt_from_the_events_and_exported() {
    use EvolutionaryEventType::*;
    let mutation = json!({"modification_type": "config", "target": "max_retries", "change": {"value": 2}, "safety_level": 2});
    let events = vec![
        event("a", None, 0, Spawn, json!({}), None),
        event("a", None, 0, GymEval, json!({}), Some(0.4)),
        event("a", None, 0, Death, json!({}), Some(0.4)),
        event("b", Some("a"), 1, Spawn, json!({}), None),
        event("b", Some("a"), 1, Mutate, json!({"mutation": mutation}), None),
        event("b", Some("a"), 1, GymEval, json!({}), Some(0.8)),
        event("b", Some("a"), 1, Survival, json!({}), Some(0.8)),
        event("b", Some("a"), 1, Mutate, json!({"evolution_type": "hot_swap"}), None),
    ];
    let tree = Lineage::from_events(&events);
    assert_eq!(tree.nodes.len(), 2);
    assert_eq!(tree.genesis.len(), 1);
    let (best, fitness) = tree.best.clone().unwrap();
    assert!(best.as_str().ends_with('b') && fitness == 0.8);
    let b = &tree.nodes[&best];
    assert_eq!(b.mutations, vec!["max_retries = 2"]);
    assert!(b.adopted && b.fate == Some(Fate::Survived));
    assert_eq!(tree.edges().len(), 1);
    let dot = tree.to_dot();
    assert!(dot.starts_with("digraph lineage {") && dot.contains("label=\"max_retries = 2\""));
    assert!(dot.contains(&format!("\"{}\" -> \"{}\"", tree.genesis[0], best)));
    let mermaid = tree.to_mermaid();
    assert!(mermaid.contains(&format!(
        "g{} -->|\"max_retries = 2\"| g{}",
        tree.genesis[0].short(),
        best.short()
    )));
    let json = tree.to_json();
    assert_eq!(json["nodes"].as_array().unwrap().len(), 2);
    assert_eq!(json["best"]["fitness"], json!(0.8));
}

proptest! {
    /// Whatever a seeded mutation draws, the child stays within its bounds and its
    /// permissions: never a tool its parent was not permitted.
    #[test]
    fn mutation_never_widens_permissions(seed in any::<u64>(), rounds in 1usize..12) {
        let space = space();
        let mut rng = SeededRng::new(seed);
        let mut g = genesis();
        for _ in 0..rounds {
            let m = space.mutation(&g, &mut rng).unwrap();
            let child = g.spawn(&m, &space).unwrap();
            prop_assert!(child.config.tools.iter().all(|t| g.permissions.contains(t)));
            prop_assert_eq!(&child.permissions, &g.permissions);
            prop_assert!(!child.config.tools.is_empty());
            prop_assert!(child.config.max_retries <= 5);
            let t = child.config.temperature.unwrap_or(0.0);
            prop_assert!((0.0..=1.0).contains(&t));
            prop_assert_eq!(child.parent_id.as_ref(), Some(&g.id));
            child.verify().unwrap();
            g = child;
        }
    }

    /// The same seed draws the same mutations.
    #[test]
    fn mutation_is_a_function_of_the_seed(seed in any::<u64>()) {
        let space = space();
        let g = genesis();
        let a = space.mutation(&g, &mut SeededRng::new(seed)).unwrap();
        let b = space.mutation(&g, &mut SeededRng::new(seed)).unwrap();
        prop_assert_eq!(a, b);
    }
}
