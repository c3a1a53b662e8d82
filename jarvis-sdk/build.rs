//! Declares the domain packs: each folder `src/packs/<name>/` is the module
//! `packs::<name>`, compiled exactly when the cargo feature `<name>` is on.
//! So a pack is one folder plus one line in `Cargo.toml`, and no file
//! outside its folder has to name it.

use std::path::Path;

fn main() {
    println!("cargo::rerun-if-changed=src/packs");
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    let packs = Path::new(&manifest).join("src").join("packs");
    let mut names: Vec<String> = std::fs::read_dir(&packs)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| e.path().join("mod.rs").is_file())
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    let mut code = String::new();
    for name in names {
        let feature = format!("CARGO_FEATURE_{}", name.to_uppercase().replace('-', "_"));
        if std::env::var_os(&feature).is_none() {
            continue;
        }
        let path = packs.join(&name).join("mod.rs");
        code.push_str(&format!(
            "#[path = {:?}]\npub mod {};\n",
            path.display().to_string(),
            name.replace('-', "_")
        ));
    }
    std::fs::write(Path::new(&out).join("packs.rs"), code).expect("OUT_DIR is writable");
}
