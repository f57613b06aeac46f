/*-------------------------------------------------------------------------
 *
 * guc.h
 *	  The dedup.* configuration parameters (guc.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEDUP_GUC_H
#define DEDUP_GUC_H

extern bool dedup_sweep_enabled;
extern int	dedup_retention;
extern int	dedup_sweep_interval;
extern int	dedup_sweep_batch_size;
extern int	dedup_sweep_max_duration;
extern int	dedup_sweep_batch_delay;
extern int	dedup_sweep_busy_share;
extern double dedup_sweep_vacuum_threshold;
extern char *dedup_databases;
extern char *dedup_sweep_role;
extern int	dedup_max_databases;
extern bool dedup_track_claims;
extern int	dedup_max_consumers;
extern bool dedup_require_consumer_roles;

extern void dedup_define_gucs(void);

#endif							/* DEDUP_GUC_H */
