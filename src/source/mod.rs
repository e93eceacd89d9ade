//! Inputs: Parquet files and Delta tables as Arrow batches, image folders and TFRecord
//! files, each in input order.

mod contain;
pub mod delta;
mod fixed_list;
pub mod hive;
pub mod images;
pub mod parquet;
pub mod tfrecord;
