/*-------------------------------------------------------------------------
 *
 * claimants.h
 *	  Who may claim for a consumer: the consumer -> role mapping of
 *	  dedup_consumer_roles (claimants.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEDUP_CLAIMANTS_H
#define DEDUP_CLAIMANTS_H

extern void dedup_check_claimant(text *consumer, const char *function);

#endif							/* DEDUP_CLAIMANTS_H */
