//! Each algorithm's remote form, and the files the other languages read
//! (`just regenerate` rewrites them): one test binary, one module a file.

mod protocol_vectors;
mod remote_form;
