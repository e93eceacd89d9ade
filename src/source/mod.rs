//! Inputs: Parquet tables (and, later, image folders) as Arrow batches in input order.

mod contain;
mod fixed_list;
pub mod hive;
pub mod images;
pub mod parquet;
